#include "live_policy.hpp"

#include "log.hpp"

#include <live_queue.hpp>
#include <repositories.hpp>

#include <cmath>

namespace baton::service {

LivePolicy makeLivePolicy(const ServiceConfig& config, db::Connection& connection)
{
    if (config.policy == "reactive")
        return { std::make_shared<sim::ReactivePolicy>(), nullptr };
    if (config.policy == "avg")
        return { std::make_shared<sim::AveragePolicy>(), nullptr };
    const auto model = db::ModelRepository(connection).latest(config.modelName);
    if (!model) {
        logWarning("policy " + config.policy + ": no model named '" + config.modelName
            + "' in the models table (train one with `batonctl sim compare --db-save`); using avg until "
              "there is");
        return { std::make_shared<sim::AveragePolicy>(), nullptr };
    }
    auto predictor = std::make_shared<const sim::WaitPredictor>(sim::WaitPredictor::fromJson(model->params));
    // The quantile chosen for this policy when the model was evaluated, else the configured one.
    double q = config.quantile;
    const auto chosen = model->metrics.find("evaluation");
    if (chosen != model->metrics.end() && chosen->contains(config.policy)) {
        const auto& row = (*chosen)[config.policy];
        if (row.contains("q") && row["q"].is_number())
            q = row["q"].get<double>();
    }
    logInfo("policy " + config.policy + ": model " + config.modelName + " version "
        + std::to_string(model->version) + ", q = " + std::to_string(q));
    return { std::make_shared<sim::QuantilePolicy>(config.policy, predictor, q), predictor };
}

DecisionPointBuilder liveDecisionPoint(
    SlurmCluster& cluster, std::shared_ptr<const sim::WaitPredictor> predictor)
{
    // One LiveQueue per squeue snapshot, shared by every chain of the tick.
    struct Cache {
        std::int64_t takenAt = -1;
        std::unique_ptr<slurm::LiveQueue> queue;
    };
    auto cache = std::make_shared<Cache>();
    return [&cluster, cache, predictor](
               const QueueSnapshot& snapshot, const ClusterJob& current, std::int64_t now) {
        if (cache->takenAt != snapshot.takenAt || !cache->queue) {
            slurm::LiveQueueOptions options;
            options.totalNodes = cluster.usableNodes();
            cache->queue = std::make_unique<slurm::LiveQueue>(cluster.lastRawQueue(), options);
            cache->takenAt = snapshot.takenAt;
        }
        sim::DecisionPoint point = timeOnlyDecisionPoint(snapshot, current, now);
        point.features
            = sim::queueFeatures(*cache->queue, sim::JobShape { current.nodes, current.timeLimitSeconds });
        point.recentMeanWait = cache->queue->recentMeanWait();
        if (predictor)
            point.meanLogWait = predictor->predictLog({ &point.features, 1 }).front();
        return point;
    };
}

} // namespace baton::service
