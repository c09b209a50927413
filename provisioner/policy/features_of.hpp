// The features of one job shape against any queue type with QueueView's members (features.hpp). A
// template, so that the simulator's own calls stay direct: the evaluation protocol makes millions.
#pragma once

#include "features.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace baton::sim {

namespace featureDetail {

inline constexpr double hour = 3600.0;

// The running jobs' nodes released at their limits, and pending jobs placed behind them strictly in
// priority order (no backfill), each at the earliest time enough nodes are free.
class FcfsPlacement {
public:
    template<class Queue>
    explicit FcfsPlacement(const Queue& queue)
        : cursor_(queue.now())
        , free_(queue.freeNodes())
    {
        for (const auto& r : queue.running())
            releases_.emplace(r.limitEnd, r.nodes);
    }

    // Places a job of `nodes` for `limit` seconds; returns its start.
    std::int64_t place(int nodes, std::int64_t limit)
    {
        while (free_ < nodes && !releases_.empty()) {
            cursor_ = std::max(cursor_, releases_.top().first);
            free_ += releases_.top().second;
            releases_.pop();
        }
        free_ -= nodes;
        releases_.emplace(cursor_ + limit, nodes);
        return cursor_;
    }

    // When a job of `nodes` would start behind the jobs placed so far (nothing is placed).
    std::int64_t startOf(int nodes) const
    {
        if (free_ >= nodes)
            return cursor_;
        FcfsPlacement probe = *this;
        return probe.place(nodes, 0);
    }

private:
    using Release = std::pair<std::int64_t, int>;
    std::priority_queue<Release, std::vector<Release>, std::greater<>> releases_;
    std::int64_t cursor_;
    int free_;
};

// When a job of `nodes` would start after the jobs ahead, placed FCFS: an upper-bound style estimate a
// model can correct.
template<class Queue>
std::int64_t fcfsStartEstimate(const Queue& sim, const std::vector<const Job*>& ahead, int nodes)
{
    FcfsPlacement placement(sim);
    for (const Job* j : ahead)
        placement.place(j->nodes, j->limit);
    return placement.place(nodes, 0);
}

} // namespace featureDetail

template<class Queue> Features featuresOf(const Queue& sim, const JobShape& shape)
{
    using featureDetail::fcfsStartEstimate;
    using featureDetail::hour;
    const std::int64_t now = sim.now();
    Job probe;
    probe.submit = now;
    probe.nodes = shape.nodes;
    probe.limit = shape.limit;
    const double ownPriority = sim.priorityOf(probe, now);

    std::vector<std::pair<double, const Job*>> ahead;
    double pendingNodeHours = 0, aheadNodeHours = 0, aheadNodes = 0;
    for (const auto& p : sim.pending()) {
        const double nodeHours = p.job.nodes * static_cast<double>(p.job.limit) / hour;
        pendingNodeHours += nodeHours;
        const double prio = sim.priorityOf(p.job, now);
        if (prio >= ownPriority) {
            ahead.emplace_back(prio, &p.job);
            aheadNodeHours += nodeHours;
            aheadNodes += p.job.nodes;
        }
    }
    std::sort(ahead.begin(), ahead.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<const Job*> aheadJobs;
    aheadJobs.reserve(ahead.size());
    for (const auto& a : ahead)
        aheadJobs.push_back(a.second);

    double runningNodeHours = 0;
    std::vector<std::pair<std::int64_t, int>> ends;
    for (const auto& r : sim.running()) {
        runningNodeHours += r.nodes * static_cast<double>(r.limitEnd - now) / hour;
        ends.emplace_back(r.limitEnd, r.nodes);
    }
    std::sort(ends.begin(), ends.end());
    std::int64_t nodesFreeAt = now;
    int avail = sim.freeNodes();
    for (const auto& [t, n] : ends) {
        if (avail >= shape.nodes)
            break;
        avail += n;
        nodesFreeAt = t;
    }

    const std::int64_t secondsOfWeek = (now + 3 * 86400) % (7 * 86400); // the epoch was a Thursday
    Features f {};
    at(f, Feature::Nodes) = static_cast<float>(shape.nodes);
    at(f, Feature::LimitHours) = static_cast<float>(shape.limit / hour);
    at(f, Feature::PendingJobs) = static_cast<float>(sim.pending().size());
    at(f, Feature::PendingNodeHours) = static_cast<float>(pendingNodeHours);
    at(f, Feature::AheadJobs) = static_cast<float>(ahead.size());
    at(f, Feature::AheadNodeHours) = static_cast<float>(aheadNodeHours);
    at(f, Feature::AheadNodes) = static_cast<float>(aheadNodes);
    at(f, Feature::RunningJobs) = static_cast<float>(sim.running().size());
    at(f, Feature::FreeNodes) = static_cast<float>(sim.freeNodes());
    at(f, Feature::RunningNodeHoursLeft) = static_cast<float>(runningNodeHours);
    at(f, Feature::HoursUntilNodesFree) = static_cast<float>((nodesFreeAt - now) / hour);
    at(f, Feature::HoursUntilStartFcfs)
        = static_cast<float>((fcfsStartEstimate(sim, aheadJobs, shape.nodes) - now) / hour);
    at(f, Feature::RecentMeanWaitHours) = static_cast<float>(sim.recentMeanWait() / hour);
    at(f, Feature::HourOfDay) = static_cast<float>((secondsOfWeek % 86400) / hour);
    at(f, Feature::DayOfWeek) = static_cast<float>(secondsOfWeek / 86400);
    return f;
}

} // namespace baton::sim
