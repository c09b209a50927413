// What a policy sees of each chain that awaits its decision: the tick's queue reduced to decision
// points, one per current job. The provisioner asks for them; the live policy (live_policy.hpp) builds
// them with the queue features.
#pragma once

#include "cluster.hpp"

#include "policy/policy.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace baton::service {

// The policies the provisioner decides with: the service's own for the chains that name none, and those
// a chain may name for itself (batond has all of reactive, avg, predict and checkpoint-aware).
struct ChainPolicies {
    ChainPolicies(std::shared_ptr<const sim::Policy> configured,
        std::map<std::string, std::shared_ptr<const sim::Policy>, std::less<>> named = {})
        : configured(std::move(configured))
        , named(std::move(named))
    { }
    // The chain's own policy where it names one that is here, else the service's.
    const sim::Policy& forChain(const std::optional<std::string>& chainPolicy) const
    {
        if (chainPolicy)
            if (const auto found = named.find(*chainPolicy); found != named.end())
                return *found->second;
        return *configured;
    }

    std::shared_ptr<const sim::Policy> configured;
    std::map<std::string, std::shared_ptr<const sim::Policy>, std::less<>> named;
};

// Turns the live queue into what a policy sees for successors shaped like each of `current`, all at once.
using DecisionPointBuilder = std::function<std::vector<sim::DecisionPoint>(
    const ClusterQueue& queue, std::span<const ClusterJob> current, std::int64_t now)>;

// The decision points without queue features: the clock and each current job's limit and remaining time,
// which is all reactive and avg need. The live builder adds the features to them.
std::vector<sim::DecisionPoint> timeOnlyDecisionPoints(
    const ClusterQueue& queue, std::span<const ClusterJob> current, std::int64_t now);

} // namespace baton::service
