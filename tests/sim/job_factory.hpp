// Shorthand for the simulator tests' hand-made jobs.
#pragma once

#include "policy/job.hpp"

namespace baton::sim::test {

inline Job job(std::int64_t id, std::int64_t submit, int nodes, std::int64_t runTime, std::int64_t limit)
{
    Job j;
    j.id = id;
    j.submit = submit;
    j.nodes = nodes;
    j.runTime = runTime;
    j.limit = limit;
    return j;
}

} // namespace baton::sim::test
