#include "live_policy.hpp"

#include "log.hpp"

#include "db/model_table.hpp"
#include "policy/live_queue.hpp"
#include "policy/model_store.hpp"

#include <cmath>

namespace baton::service {

namespace {

// predict or checkpoint-aware on `predictor`, by the rule stored with its model for that policy (predict:
// one per job size, or one quantile; checkpoint-aware: one quantile), else the configured quantile.
std::shared_ptr<const sim::Policy> learnedPolicy(const std::string& name, const ServiceConfig& config,
    const db::Model& model, const std::shared_ptr<const sim::WaitPredictor>& predictor)
{
    const std::string modelLabel = config.modelName + " version " + std::to_string(model.version);
    const bool checkpointAware = name == "checkpoint-aware";
    std::optional<sim::StoredRule> stored = sim::storedRuleFor(model.metrics, name);
    if (stored && !stored->unreadable.empty())
        logWarning("policy " + name + ": model " + modelLabel + " has unusable rules (" + stored->unreadable
            + "); using its quantile");
    if (stored && checkpointAware && !stored->perSize.empty()) {
        logWarning("policy " + name + ": model " + modelLabel + " stores rules per size, which it does not "
            "take; using its quantile");
        stored->perSize.clear();
    }
    const sim::DecisionRule all { sim::DecisionRule::Kind::Quantile,
        stored && stored->q ? *stored->q : config.quantile, stored ? stored->persist : 1 };
    const auto perSize = stored ? stored->perSize : std::vector<sim::ShapeRulesPolicy::ForShape>();
    std::shared_ptr<const sim::Policy> policy = sim::makeLearnedPolicy(
        name, predictor, all, perSize, sim::storedTolerance(model.metrics), config.submitLead.count());
    if (!perSize.empty())
        logInfo("policy " + name + ": model " + modelLabel + ", " + sim::describeRules(perSize));
    else
        logInfo("policy " + name + ": model " + modelLabel + ", q = " + std::to_string(all.value)
            + (all.persist > 1 ? ", persisting " + std::to_string(all.persist) + " ticks" : "")
            + (checkpointAware ? ", or avg's rule when that comes first, and avg's alone after a successor "
                                 "that waited no longer than the submit lead"
                               : ""));
    return policy;
}

} // namespace

LivePolicies makeLivePolicies(const ServiceConfig& config, db::Connection& connection)
{
    // A missing model matters most where the service's own policy needs it; chains may name one anyway.
    const bool configuredLearns = sim::isLearnedPolicy(config.policy);
    const auto model = db::ModelTable(connection).latest(config.modelName);
    std::shared_ptr<const sim::WaitPredictor> predictor;
    if (!model) {
        (configuredLearns ? logWarning : logInfo)("predict and checkpoint-aware: no model named '" + config.modelName
            + "' in the models table (train one with `batonctl sim compare --db-save`); they decide as avg "
              "until there is");
    } else {
        try {
            predictor = std::make_shared<const sim::WaitPredictor>(sim::predictorOf(*model));
        } catch (const std::runtime_error& error) {
            (configuredLearns ? logError : logWarning)("predict and checkpoint-aware: " + std::string(error.what())
                + "; they decide as avg until there is a usable model");
        }
    }
    const auto average = std::make_shared<sim::AveragePolicy>();
    std::map<std::string, std::shared_ptr<const sim::Policy>, std::less<>> named {
        { "reactive", std::make_shared<sim::ReactivePolicy>() }, { "avg", average } };
    for (const char* name : { "predict", "checkpoint-aware" })
        named[name] = predictor ? learnedPolicy(name, config, *model, predictor) : average;
    auto configured = named.at(config.policy);
    return LivePolicies { ChainPolicies(std::move(configured), std::move(named)), predictor };
}

DecisionPointBuilder liveDecisionPoints(
    std::function<int()> usableNodes, std::shared_ptr<const sim::WaitPredictor> predictor)
{
    // The starts of every tick since this process began leading, as the simulator remembers them.
    auto recentStarts = std::make_shared<slurm::RecentStarts>();
    return [usableNodes = std::move(usableNodes), predictor, recentStarts](
               const ClusterQueue& snapshot, std::span<const ClusterJob> current, std::int64_t now) {
        slurm::LiveQueueOptions options;
        options.totalNodes = usableNodes();
        const slurm::LiveQueue queue(snapshot.squeue, options, {}, recentStarts.get());
        std::vector<sim::JobShape> shapes;
        shapes.reserve(current.size());
        for (const ClusterJob& job : current)
            shapes.push_back(sim::JobShape { job.nodes, job.timeLimitSeconds });
        auto points = timeOnlyDecisionPoints(snapshot, current, now);
        auto features = sim::queueFeatures(queue, std::span<const sim::JobShape>(shapes));
        const std::vector<double> meanLogWaits
            = predictor ? predictor->predictLog(features) : std::vector<double>();
        for (std::size_t i = 0; i < points.size(); ++i) {
            points[i].features = features[i];
            points[i].recentMeanWait = queue.recentMeanWait();
            if (predictor)
                points[i].meanLogWait = meanLogWaits[i];
        }
        return points;
    };
}

} // namespace baton::service
