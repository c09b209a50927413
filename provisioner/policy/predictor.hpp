// A quantile-aware queue-wait predictor: gradient-boosted trees (xgboost C API) on log(1 + wait),
// with the quantiles of the residual measured on a held-out, later part of the training data.
// xgboost 1.7 has no quantile objective ('reg:quantileerror' arrived in 2.0), so the q-quantile of the
// wait is exp(mean log-wait + residual q-quantile) - 1: a conditional location model with a
// calibrated, shared residual distribution.
//
// Trees cannot predict beyond the waits they were trained on: a queue that grows past its training
// period gets waits capped at the longest seen. Trained relative to the recent wait
// (WaitOffset::RecentWait), the trees learn log1p(wait) - log1p(recent mean wait), the offset fed to
// xgboost as each row's base margin, so that a prediction moves with the queue's recent level beyond
// anything seen in training.
#pragma once

#include "features.hpp"

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace baton::sim {

struct WaitSample {
    Features x {};
    double waitSeconds = 0;
};

// What the trees predict the log-wait relative to: nothing, or the row's recent mean wait.
enum class WaitOffset { None, RecentWait };

struct TrainOptions {
    WaitOffset offset = WaitOffset::None;
    int rounds = 200;
    int maxDepth = 6;
    double learningRate = 0.05;
    double heldOutFraction = 0.2; // the last part of the samples (in the given order) calibrates
    int threads = 1;
    unsigned seed = 0;
};

struct PredictorMetrics {
    std::size_t trainRows = 0;
    std::size_t heldOutRows = 0;
    double heldOutMaeLog = 0; // mean |log1p(wait) error| on the held-out rows
    double heldOutMedianAbsErrorSeconds = 0; // of the median prediction
    double heldOutCoverage90 = 0; // fraction of held-out waits <= the predicted 0.9-quantile
    double trainSeconds = 0;
};

class WaitPredictor {
public:
    // Throws std::invalid_argument when there are too few samples.
    static WaitPredictor train(std::span<const WaitSample> samples, const TrainOptions& options);
    static WaitPredictor load(const std::filesystem::path& path);
    static WaitPredictor fromJson(const nlohmann::json& doc);

    void save(const std::filesystem::path& path) const;
    nlohmann::json toJson() const;

    // Mean log1p(wait) for each row.
    std::vector<double> predictLog(std::span<const Features> rows) const;
    // The q-quantile (0 < q < 1) of the wait in seconds, given a row's mean log-wait.
    double quantileSeconds(double meanLog, double q) const;
    // Its inverse: the probability that the wait is at most `seconds`. The residual quantiles span
    // 0.01-0.99, so the answer does too, clamped at the ends.
    double probabilityAtMost(double meanLog, double seconds) const;
    const PredictorMetrics& metrics() const { return metrics_; }
    WaitOffset offset() const { return offset_; }

private:
    WaitPredictor() = default;
    std::shared_ptr<void> booster_;
    WaitOffset offset_ = WaitOffset::None;
    std::vector<double> residualQuantiles_; // at q = 0.01, 0.02, ..., 0.99
    PredictorMetrics metrics_;
};

} // namespace baton::sim
