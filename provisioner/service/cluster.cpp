#include "cluster.hpp"

namespace baton::service {

void ClusterQueue::index() const
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

const ClusterJob* ClusterQueue::find(std::int64_t id) const
{
    index();
    const auto found = byId_.find(id);
    return found == byId_.end() ? nullptr : &jobs[found->second];
}

const ClusterJob* ClusterQueue::findByComment(const std::string& comment, std::int64_t ownerUid) const
{
    index();
    // A key names one submission; should a withdrawn job share it, the live one is the submission's.
    const ClusterJob* withdrawn = nullptr;
    const auto [first, last] = byComment_.equal_range(comment);
    for (auto it = first; it != last; ++it) {
        const ClusterJob& job = jobs[it->second];
        if (job.userId != ownerUid)
            continue;
        if (!job.withdrawn())
            return &job;
        withdrawn = &job;
    }
    return withdrawn;
}

} // namespace baton::service
