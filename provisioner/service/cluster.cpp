#include "cluster.hpp"

namespace baton::service {

void QueueSnapshot::index() const
{
    if (indexed_ == jobs.size() && (jobs.empty() || !byId_.empty()))
        return;
    byId_.clear();
    byComment_.clear();
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        byId_.emplace(jobs[i].id, i);
        if (!jobs[i].comment.empty())
            byComment_.emplace(jobs[i].comment, i);
    }
    indexed_ = jobs.size();
}

const ClusterJob* QueueSnapshot::find(std::int64_t id) const
{
    index();
    const auto found = byId_.find(id);
    return found == byId_.end() ? nullptr : &jobs[found->second];
}

const ClusterJob* QueueSnapshot::findByComment(const std::string& comment, std::int64_t ownerUid) const
{
    index();
    const auto [first, last] = byComment_.equal_range(comment);
    for (auto it = first; it != last; ++it)
        if (jobs[it->second].userId == ownerUid)
            return &jobs[it->second];
    return nullptr;
}

} // namespace baton::service
