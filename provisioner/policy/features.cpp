#include "features.hpp"

#include "features_of.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace baton::sim {

using featureDetail::hour;

const std::array<const char*, featureCount> featureNames = {
    "nodes",
    "limit_hours",
    "pending_jobs",
    "pending_node_hours",
    "ahead_jobs",
    "ahead_node_hours",
    "ahead_nodes",
    "running_jobs",
    "free_nodes",
    "running_node_hours_left",
    "hours_until_nodes_free",
    "hours_until_start_fcfs",
    "recent_mean_wait_hours",
    "hour_of_day",
    "day_of_week",
};

Features queueFeatures(const QueueView& queue, const JobShape& shape)
{
    return featuresOf(queue, shape);
}

namespace {

// Pending jobs by priority, highest first: the jobs ahead of any probe are a prefix of this order.
struct RankedPending {
    struct Ranked {
        double priority;
        std::uint32_t index;
    };
    std::vector<Ranked> ranked;
    double pendingNodeHours = 0;
    std::vector<double> aheadHours, aheadNodes; // sums over the first k ranked jobs, at [k]

    RankedPending(const QueueView& queue, std::span<const PendingJob> pending, std::int64_t now)
        : ranked(pending.size())
    {
        for (std::uint32_t i = 0; i < pending.size(); ++i) {
            const Job& j = pending[i].job;
            pendingNodeHours += j.nodes * static_cast<double>(j.limit) / hour;
            ranked[i] = { queue.priorityOf(j, now), i };
        }
        std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
            return a.priority != b.priority ? a.priority > b.priority : a.index < b.index;
        });
        aheadHours.assign(ranked.size() + 1, 0.0);
        aheadNodes.assign(ranked.size() + 1, 0.0);
        for (std::size_t r = 0; r < ranked.size(); ++r) {
            const Job& j = pending[ranked[r].index].job;
            aheadHours[r + 1] = aheadHours[r] + j.nodes * static_cast<double>(j.limit) / hour;
            aheadNodes[r + 1] = aheadNodes[r] + j.nodes;
        }
    }

    // How many pending jobs are ahead of a job of this priority.
    std::size_t aheadOf(double own) const
    {
        return static_cast<std::size_t>(std::partition_point(ranked.begin(), ranked.end(),
                                            [&](const Ranked& r) { return r.priority >= own; })
            - ranked.begin());
    }
};

// The running jobs' ends at their limits: when `nodes` nodes are free without any pending job starting.
struct RunningEnds {
    double runningNodeHours = 0;
    std::vector<std::pair<std::int64_t, int>> ends; // sorted
    std::vector<std::int64_t> availAfter; // free nodes once ends[0..k] have ended
    std::int64_t now;
    int freeNow;

    RunningEnds(std::span<const RunningJob> running, std::int64_t now, int freeNow)
        : now(now)
        , freeNow(freeNow)
    {
        ends.reserve(running.size());
        for (const auto& r : running) {
            runningNodeHours += r.nodes * static_cast<double>(r.limitEnd - now) / hour;
            ends.emplace_back(r.limitEnd, r.nodes);
        }
        std::sort(ends.begin(), ends.end());
        availAfter.resize(ends.size());
        for (std::size_t k = 0; k < ends.size(); ++k)
            availAfter[k] = (k == 0 ? freeNow : availAfter[k - 1]) + ends[k].second;
    }

    std::int64_t nodesFreeAt(int nodes) const
    {
        if (freeNow >= nodes || ends.empty())
            return now;
        const auto it
            = std::lower_bound(availAfter.begin(), availAfter.end(), static_cast<std::int64_t>(nodes));
        return it == availAfter.end() ? ends.back().first
                                      : ends[static_cast<std::size_t>(it - availAfter.begin())].first;
    }
};

// Each shape's FCFS start estimate (featureDetail::fcfsStartEstimate): the jobs ahead are placed once,
// in order of growing prefix; each probe starts from a copy of the state at its own prefix.
std::vector<std::int64_t> fcfsStarts(const QueueView& queue, const RankedPending& order,
    std::span<const std::size_t> aheadCount, std::span<const JobShape> shapes)
{
    const auto pending = queue.pending();
    std::vector<std::size_t> byAhead(shapes.size());
    for (std::size_t s = 0; s < shapes.size(); ++s)
        byAhead[s] = s;
    std::sort(byAhead.begin(), byAhead.end(), [&](std::size_t a, std::size_t b) {
        return aheadCount[a] != aheadCount[b] ? aheadCount[a] < aheadCount[b]
                                              : shapes[a].nodes < shapes[b].nodes;
    });
    featureDetail::FcfsPlacement placement(queue);
    std::size_t placed = 0;
    std::vector<std::int64_t> fcfsStart(shapes.size());
    std::size_t lastAhead = SIZE_MAX;
    int lastNodes = -1;
    std::int64_t lastStart = queue.now();
    for (const std::size_t s : byAhead) {
        const int nodes = shapes[s].nodes;
        if (aheadCount[s] == lastAhead && nodes == lastNodes) {
            fcfsStart[s] = lastStart;
            continue;
        }
        for (; placed < aheadCount[s]; ++placed) {
            const Job& j = pending[order.ranked[placed].index].job;
            placement.place(j.nodes, j.limit);
        }
        fcfsStart[s] = lastStart = placement.startOf(nodes);
        lastAhead = aheadCount[s];
        lastNodes = nodes;
    }
    return fcfsStart;
}

} // namespace

std::vector<Features> queueFeatures(const QueueView& queue, std::span<const JobShape> shapes)
{
    const std::int64_t now = queue.now();
    const auto pending = queue.pending();
    const auto running = queue.running();
    const RankedPending order(queue, pending, now);
    const RunningEnds ends(running, now, queue.freeNodes());

    // Each shape's own priority and so how many jobs are ahead of it.
    std::vector<std::size_t> aheadCount(shapes.size());
    for (std::size_t s = 0; s < shapes.size(); ++s) {
        Job probe;
        probe.submit = now;
        probe.nodes = shapes[s].nodes;
        probe.limit = shapes[s].limit;
        aheadCount[s] = order.aheadOf(queue.priorityOf(probe, now));
    }
    const auto fcfsStart = fcfsStarts(queue, order, aheadCount, shapes);

    const std::int64_t secondsOfWeek = (now + 3 * 86400) % (7 * 86400); // the epoch was a Thursday
    const double recentWait = queue.recentMeanWait();
    std::vector<Features> out(shapes.size());
    for (std::size_t s = 0; s < shapes.size(); ++s) {
        const JobShape& shape = shapes[s];
        const std::size_t k = aheadCount[s];
        Features& f = out[s];
        at(f, Feature::Nodes) = static_cast<float>(shape.nodes);
        at(f, Feature::LimitHours) = static_cast<float>(shape.limit / hour);
        at(f, Feature::PendingJobs) = static_cast<float>(pending.size());
        at(f, Feature::PendingNodeHours) = static_cast<float>(order.pendingNodeHours);
        at(f, Feature::AheadJobs) = static_cast<float>(k);
        at(f, Feature::AheadNodeHours) = static_cast<float>(order.aheadHours[k]);
        at(f, Feature::AheadNodes) = static_cast<float>(order.aheadNodes[k]);
        at(f, Feature::RunningJobs) = static_cast<float>(running.size());
        at(f, Feature::FreeNodes) = static_cast<float>(ends.freeNow);
        at(f, Feature::RunningNodeHoursLeft) = static_cast<float>(ends.runningNodeHours);
        at(f, Feature::HoursUntilNodesFree)
            = static_cast<float>((ends.nodesFreeAt(shape.nodes) - now) / hour);
        at(f, Feature::HoursUntilStartFcfs) = static_cast<float>((fcfsStart[s] - now) / hour);
        at(f, Feature::RecentMeanWaitHours) = static_cast<float>(recentWait / hour);
        at(f, Feature::HourOfDay) = static_cast<float>((secondsOfWeek % 86400) / hour);
        at(f, Feature::DayOfWeek) = static_cast<float>(secondsOfWeek / 86400);
    }
    return out;
}

} // namespace baton::sim
