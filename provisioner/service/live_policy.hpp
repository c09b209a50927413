// The policies, live: the same policy classes and queue features as the simulator, fed from the squeue
// snapshot instead of a replay.
#pragma once

#include "config.hpp"
#include "decision_points.hpp"

#include "db/connection.hpp"

#include <functional>
#include <memory>

namespace baton::service {

// Every policy a chain may follow, the configured one for those that name none. reactive and avg need
// nothing; predict and checkpoint-aware share the newest version of the configured model from the
// `models` table, each with the rule chosen for it when the model was evaluated (one per job size, or
// one quantile). Without a usable model they decide as avg, with a warning.
struct LivePolicies {
    ChainPolicies policies;
    std::shared_ptr<const sim::WaitPredictor> predictor; // null without a usable model
};
LivePolicies makeLivePolicies(const ServiceConfig& config, db::Connection& connection);

// The decision points of the chains' current jobs, with the queue features of the tick's squeue snapshot
// computed for all of them in one pass, on `usableNodes()` nodes; with a predictor, each mean log-wait
// is filled in (one batch) so that the decision records what the model predicted.
DecisionPointBuilder liveDecisionPoints(
    std::function<int()> usableNodes, std::shared_ptr<const sim::WaitPredictor> predictor);

} // namespace baton::service
