// What a policy sees of each chain that awaits its decision: the tick's queue reduced to decision
// points, one per current job. The provisioner asks for them; the live policy (live_policy.hpp) builds
// them with the queue features.
#pragma once

#include "cluster.hpp"

#include "policy/policy.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace baton::service {

// Turns the live queue into what a policy sees for successors shaped like each of `current`, all at once.
using DecisionPointBuilder = std::function<std::vector<sim::DecisionPoint>(
    const ClusterQueue& queue, std::span<const ClusterJob> current, std::int64_t now)>;

// The decision points without queue features: the clock and each current job's remaining time, which is
// all reactive and avg need. The live builder adds the features to them.
std::vector<sim::DecisionPoint> timeOnlyDecisionPoints(
    const ClusterQueue& queue, std::span<const ClusterJob> current, std::int64_t now);

} // namespace baton::service
