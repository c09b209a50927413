// Queue-state features for predicting how long a job submitted now would wait.
#pragma once

#include "queue_view.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace baton::sim {

inline constexpr std::size_t featureCount = 15;
using Features = std::array<float, featureCount>;

// Names in the order of Features, stored with trained models.
extern const std::array<const char*, featureCount> featureNames;

// The positions in Features, in the order of featureNames (trained models store vectors by position).
enum class Feature : std::size_t {
    Nodes,
    LimitHours,
    PendingJobs,
    PendingNodeHours,
    AheadJobs,
    AheadNodeHours,
    AheadNodes,
    RunningJobs,
    FreeNodes,
    RunningNodeHoursLeft,
    HoursUntilNodesFree,
    HoursUntilStartFcfs,
    RecentMeanWaitHours,
    HourOfDay,
    DayOfWeek,
};
static_assert(static_cast<std::size_t>(Feature::DayOfWeek) + 1 == featureCount);

// A feature by name: `at(features, Feature::AheadJobs)`.
constexpr float& at(Features& features, Feature which)
{
    return features[static_cast<std::size_t>(which)];
}

constexpr float at(const Features& features, Feature which)
{
    return features[static_cast<std::size_t>(which)];
}

struct JobShape {
    int nodes = 1;
    std::int64_t limit = 48 * 3600;
};

// The state of `queue` at its current time, seen by a job of `shape` submitted now. The simulator calls
// featuresOf() (features_of.hpp) on itself instead, without the virtual calls.
Features queueFeatures(const QueueView& queue, const JobShape& shape);

// The features of many shapes against one queue state: the queue is sorted once and jobs ahead are
// placed once, so a tick over many chains costs little more than one. Equal to queueFeatures() per
// shape up to float rounding of the node-hour sums, provided no two pending jobs share a priority
// (ties are ordered by pending position here, unspecified there).
std::vector<Features> queueFeatures(const QueueView& queue, std::span<const JobShape> shapes);

} // namespace baton::sim
