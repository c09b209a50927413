// Shorthand for the simulator tests' hand-made jobs.
#pragma once

#include "policy/job.hpp"

#include <cstdint>
#include <random>
#include <vector>

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

// `count` jobs from a generator seeded with `seed`: each submitted up to `maxGap` s after the last, on 1 to
// `maxNodes` nodes, with a limit of `minLimit` plus up to `limitSpread` s and a run time under it.
inline std::vector<Job> randomJobs(std::uint64_t seed, int count, std::uint64_t maxGap, std::uint64_t maxNodes,
    std::int64_t minLimit, std::uint64_t limitSpread)
{
    std::mt19937_64 rng(seed);
    std::vector<Job> jobs;
    std::int64_t t = 0;
    for (int i = 0; i < count; ++i) {
        t += static_cast<std::int64_t>(rng() % maxGap);
        const std::int64_t limit = minLimit + static_cast<std::int64_t>(rng() % limitSpread);
        jobs.push_back(
            job(i, t, 1 + static_cast<int>(rng() % maxNodes), static_cast<std::int64_t>(rng() % limit), limit));
    }
    return jobs;
}

} // namespace baton::sim::test
