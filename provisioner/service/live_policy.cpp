#include "live_policy.hpp"

#include "log.hpp"

#include "db/model_table.hpp"
#include "policy/live_queue.hpp"
#include "policy/model_store.hpp"

#include <cmath>

namespace baton::service {

LivePolicy makeLivePolicy(const ServiceConfig& config, db::Connection& connection)
{
    if (config.policy == "reactive")
        return { std::make_shared<sim::ReactivePolicy>(), nullptr };
    if (config.policy == "avg")
        return { std::make_shared<sim::AveragePolicy>(), nullptr };
    const auto model = db::ModelTable(connection).latest(config.modelName);
    if (!model) {
        logWarning("policy " + config.policy + ": no model named '" + config.modelName
            + "' in the models table (train one with `batonctl sim compare --db-save`); using avg until "
              "there is");
        return { std::make_shared<sim::AveragePolicy>(), nullptr };
    }
    std::shared_ptr<const sim::WaitPredictor> predictor;
    try {
        predictor = std::make_shared<const sim::WaitPredictor>(sim::predictorOf(*model));
    } catch (const std::runtime_error& error) {
        logError("policy " + config.policy + ": " + error.what() + "; using avg until there is a usable one");
        return { std::make_shared<sim::AveragePolicy>(), nullptr };
    }
    // The rule chosen for this policy when the model was evaluated (one per job size, or one quantile),
    // else the configured quantile.
    const std::string modelLabel = config.modelName + " version " + std::to_string(model->version);
    const std::optional<sim::StoredRule> stored = sim::storedRuleFor(model->metrics, config.policy);
    if (stored && !stored->unreadable.empty())
        logWarning("policy " + config.policy + ": model " + modelLabel + " has unusable rules ("
            + stored->unreadable + "); using its quantile");
    if (stored && !stored->perSize.empty()) {
        auto policy = std::make_shared<sim::ShapeRulesPolicy>(
            config.policy, predictor, stored->perSize, sim::storedTolerance(model->metrics));
        logInfo("policy " + config.policy + ": model " + modelLabel + ", " + sim::describeRules(policy->rules()));
        return { policy, predictor };
    }
    const double q = stored && stored->q ? *stored->q : config.quantile;
    const int persist = stored ? stored->persist : 1;
    logInfo("policy " + config.policy + ": model " + modelLabel + ", q = " + std::to_string(q)
        + (persist > 1 ? ", persisting " + std::to_string(persist) + " ticks" : ""));
    return { std::make_shared<sim::QuantilePolicy>(config.policy, predictor, q, 0.0, persist), predictor };
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
