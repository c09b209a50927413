// Trained wait predictors in the database's `models` table: the whole model document goes into
// `params` (so that the row alone restores the predictor), its held-out metrics and the policies'
// chosen quantiles into `metrics`, and the file it was also saved to (if any) into `path`.
#pragma once

#include "policy.hpp"
#include "predictor.hpp"

#include "db/connection.hpp"
#include "db/model_table.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace baton::sim {

inline constexpr const char* waitPredictorKind = "wait-predictor/xgboost-log-quantile";

struct StoredModel {
    std::int64_t id = 0;
    std::int32_t version = 0;
};

// Inserts the predictor as the next version of `name`. `extraMetrics` are merged into `metrics`.
StoredModel storeModel(db::Connection& connection, const WaitPredictor& predictor, const std::string& name,
    const std::optional<std::string>& path, const nlohmann::json& extraMetrics = {});

// The highest version of `name`'s row; throws std::runtime_error if there is none.
db::Model latestStoredModel(db::Connection& connection, const std::string& name);
// Its predictor; throws std::runtime_error if there is none or it is not a predictor.
WaitPredictor loadStoredModel(db::Connection& connection, const std::string& name);
// The predictor of a `models` row; throws std::runtime_error if it is not one or is malformed.
WaitPredictor predictorOf(const db::Model& model);

// The decision rule that `sim compare --db-save` chose for a learned policy and stored with the model
// (metrics.evaluation.POLICY): one rule per job size, or one quantile with its persistence. batond
// decides by it, and so does `sim run --db-model`, so that the simulator decides as the service does.
struct StoredRule {
    std::vector<ShapeRulesPolicy::ForShape> perSize; // empty: the quantile rule
    std::optional<double> q;
    int persist = 1;
    std::string unreadable; // why per-size rules that are stored were left out for the quantile
};
// nullopt where the model stores no usable rule for `policy`.
std::optional<StoredRule> storedRuleFor(const nlohmann::json& metrics, const std::string& policy);
// The tolerance the rules were chosen under (metrics.tolerance_s; 600 s where absent).
double storedTolerance(const nlohmann::json& metrics);

} // namespace baton::sim
