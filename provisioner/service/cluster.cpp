#include "cluster.hpp"

namespace baton::service {

const ClusterJob* QueueSnapshot::find(std::int64_t id) const
{
    for (const ClusterJob& job : jobs)
        if (job.id == id)
            return &job;
    return nullptr;
}

const ClusterJob* QueueSnapshot::findByComment(const std::string& comment) const
{
    for (const ClusterJob& job : jobs)
        if (job.comment == comment)
            return &job;
    return nullptr;
}

} // namespace baton::service
