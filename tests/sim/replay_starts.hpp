// Replays hand-made jobs to the end: the start time of every job, by id (-1: never started).
#pragma once

#include "sim/simulator.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace baton::sim::test {

inline std::map<std::int64_t, std::int64_t> replay(std::vector<Job> jobs, const SchedulerConfig& config)
{
    prepareTrace(jobs, config.nodes);
    auto trace = std::make_shared<const std::vector<Job>>(jobs);
    Simulator sim(trace, config);
    std::vector<std::int64_t> starts(trace->size(), -1);
    sim.recordStartsInto(&starts);
    sim.runToEnd();
    EXPECT_TRUE(sim.finished());
    std::map<std::int64_t, std::int64_t> byId;
    for (std::size_t i = 0; i < trace->size(); ++i)
        byId[(*trace)[i].id] = starts[i];
    return byId;
}

} // namespace baton::sim::test
