// Provisioning policies: when to submit a chain's successor while its predecessor runs.
#pragma once

#include "features.hpp"
#include "predictor.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace baton::sim {

// The policies batond runs: the service's configured one, and any a chain names for itself.
inline constexpr std::array<std::string_view, 4> livePolicyNames { "reactive", "avg", "predict",
    "checkpoint-aware" };
bool isLivePolicy(std::string_view name);
// "reactive, avg, predict, checkpoint-aware", for messages that list them.
std::string livePolicyList();
// Those whose decisions come from a fitted wait model.
bool isLearnedPolicy(std::string_view name);

// What a policy sees on one tick while the predecessor runs.
struct DecisionPoint {
    std::int64_t now = 0;
    std::int64_t remaining = 0; // seconds until the predecessor reaches its limit
    std::int64_t limit = 0; // the predecessor's time limit, seconds; 0: none known
    Features features {}; // queue state as seen by the successor's shape
    double recentMeanWait = 0; // mean queue wait of the last 100 jobs that started
    // How long the running job waited in the queue after the chain submitted it as a successor: the
    // outcome of the policy's own last decision. NaN for the chain's first job (its owner's).
    double lastSuccessorWait = std::numeric_limits<double>::quiet_NaN();
    // The predictor's mean log-wait for this tick when the caller has already computed it for a batch
    // (NaN otherwise): spares each quantile policy the same inference.
    double meanLogWait = std::numeric_limits<double>::quiet_NaN();
};

class Policy {
public:
    virtual ~Policy() = default;
    virtual std::string name() const = 0;
    // Index of the first tick at which the policy submits the successor; points.size() means it waits
    // for the predecessor's end. Taking all ticks at once lets learned policies predict in one batch;
    // a live provisioner passes one tick at a time (batond: through firstSubmitWithLead).
    virtual std::size_t firstSubmit(std::span<const DecisionPoint> points) const = 0;
    bool submitNow(const DecisionPoint& point) const { return firstSubmit({ &point, 1 }) == 0; }
    // Whether the policy reads DecisionPoint::features: a caller may leave them empty otherwise, which
    // spares the feature computation on every tick of a long chain.
    virtual bool needsFeatures() const { return true; }
};

// The lead floor under every policy but reactive, as batond applies it (--submit-lead-seconds): the
// successor is submitted `lead` seconds before the predecessor's limit at the latest, since sbatch and
// the scheduler's next cycle take time and a successor submitted at the last second always leaves a
// gap. The lead is at most half of the limit: on a free cluster the successor starts at once and the
// job hands over, so a lead near the limit would end every job of a short-limit chain before it trained.
std::int64_t submitLeadFor(std::int64_t lead, std::int64_t limitSeconds);
// policy.firstSubmit(points), or the first tick within `lead` of the end if that comes earlier.
std::size_t firstSubmitWithLead(
    const Policy& policy, std::span<const DecisionPoint> points, std::int64_t lead);

// Mirage's baseline: submit when the predecessor ends.
class ReactivePolicy final : public Policy {
public:
    std::string name() const override { return "reactive"; }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override;
    bool needsFeatures() const override { return false; }
};

// Mirage's baseline: submit one recent average queue wait before the predecessor's end.
class AveragePolicy final : public Policy {
public:
    std::string name() const override { return "avg"; }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override;
    bool needsFeatures() const override { return false; }
};

// Submit once the predicted q-quantile of the successor's wait has reached the predecessor's remaining
// time minus a margin on `persist` consecutive ticks (1 = at the first crossing; more ignores a
// momentary spike of the queue). `predict` is this rule, and `checkpoint-aware` builds on it, each with
// a q chosen on the training period under its own cost model (see protocol.hpp).
class QuantilePolicy final : public Policy {
public:
    QuantilePolicy(std::string name, std::shared_ptr<const WaitPredictor> predictor, double q,
        double marginSeconds = 0, int persist = 1);
    std::string name() const override { return name_; }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override;
    double q() const { return q_; }
    int persist() const { return persist_; }

private:
    std::string name_;
    std::shared_ptr<const WaitPredictor> predictor_;
    double q_;
    double margin_;
    int persist_;
};

// checkpoint-aware: the earlier of the quantile rule (its q chosen on the training period under
// handoverCost and the overlap budget, see protocol.hpp) and avg's rule. A handover makes an early start
// cheap and a late one costs the whole gap, so where the model and the live recent wait disagree it
// follows the one that says "now". That covers a queue that grows past the model's training: trees
// answer as for the longest waits they saw, and the quantile alone would submit too late.
// Except after a successor that started at once (waited no longer than the lead floor, `submitLead` as
// submitLeadFor caps it for the predecessor's limit):
// the queue has room for this shape, an early successor would only cut its predecessor short again, and
// a model trained on a busier queue would repeat that on every job (a chain of many short jobs). Then
// avg's rule alone decides, which still submits early once the recent waits grow.
class CheckpointAwarePolicy final : public Policy {
public:
    CheckpointAwarePolicy(
        std::shared_ptr<const WaitPredictor> predictor, double q, int persist, std::int64_t submitLead);
    std::string name() const override { return "checkpoint-aware"; }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override;
    double q() const { return byQuantile_.q(); }
    int persist() const { return byQuantile_.persist(); }
    std::int64_t submitLead() const { return submitLead_; }

private:
    QuantilePolicy byQuantile_;
    std::int64_t submitLead_;
};

// Submit at the first tick at which the predicted probability that the successor starts within
// ±tolerance of the predecessor's limit, P(remaining - tolerance < wait <= remaining + tolerance), is
// at least tau: the rule that aims at Mirage's ±10-min target itself rather than at a quantile.
class WindowPolicy final : public Policy {
public:
    WindowPolicy(std::string name, std::shared_ptr<const WaitPredictor> predictor, double tau,
        double toleranceSeconds);
    std::string name() const override { return name_; }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override;
    double tau() const { return tau_; }

private:
    std::string name_;
    std::shared_ptr<const WaitPredictor> predictor_;
    double tau_;
    double tolerance_;
};

// A decision rule of a learned policy, as chosen on the held-out probes and stored with its model.
struct DecisionRule {
    enum class Kind { Quantile, Window };
    Kind kind = Kind::Quantile;
    double value = 0.5; // q, or tau
    int persist = 1; // ticks a quantile crossing must last
    const char* kindName() const { return kind == Kind::Window ? "window" : "quantile"; }
    std::string describe() const; // e.g. "quantile q=0.25", "window tau=0.65"
};
std::unique_ptr<Policy> makeRulePolicy(const std::string& name,
    std::shared_ptr<const WaitPredictor> predictor, const DecisionRule& rule, double toleranceSeconds);

// One rule per job size: the waits of a 1-node and an 8-node job differ in kind (backfill starts small
// jobs in holes), and so does the rule that places them best. A chain follows the rule of the nearest
// size it was chosen for (by ratio, the smaller on a tie). The size is the features' node count.
class ShapeRulesPolicy final : public Policy {
public:
    struct ForShape {
        int nodes = 1;
        DecisionRule rule;
    };
    ShapeRulesPolicy(std::string name, std::shared_ptr<const WaitPredictor> predictor,
        std::vector<ForShape> rules, double toleranceSeconds);
    std::string name() const override { return name_; }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override;
    const std::vector<ForShape>& rules() const { return rules_; }

private:
    const Policy& ruleFor(double nodes) const;

    std::string name_;
    std::vector<ForShape> rules_; // by node count
    std::vector<std::unique_ptr<Policy>> policies_; // rules_[i]'s
};

// predict or checkpoint-aware by its rules, as the simulator chose them or a stored model carries them:
// one rule per size (`perSize`, predict only) or one for all. The one place the simulator and batond
// build them. checkpoint-aware takes one quantile rule and `submitLead`, batond's lead floor before
// submitLeadFor's cap (CheckpointAwarePolicy). Throws std::invalid_argument on anything else.
std::unique_ptr<Policy> makeLearnedPolicy(const std::string& name,
    std::shared_ptr<const WaitPredictor> predictor, const DecisionRule& all, const std::vector<ShapeRulesPolicy::ForShape>& perSize, double toleranceSeconds,
    std::int64_t submitLead);

// "1 node: window tau=0.65; 8 nodes: quantile q=0.25" (no comma: it is also a CSV field).
std::string describeRules(const std::vector<ShapeRulesPolicy::ForShape>& rules);
// As stored with a model: [{"nodes": 1, "rule": "window", "value": 0.65, "persist": 1}, ...]. The reader
// throws std::invalid_argument on anything else.
nlohmann::json rulesToJson(const std::vector<ShapeRulesPolicy::ForShape>& rules);
std::vector<ShapeRulesPolicy::ForShape> rulesFromJson(const nlohmann::json& doc);

} // namespace baton::sim
