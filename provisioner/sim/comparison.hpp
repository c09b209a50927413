// The whole evaluation: train a wait predictor on probe submissions before the split, choose each
// learned policy's quantile on the last part of the training period, then run every policy on the
// probes after the split.
#pragma once

#include "policy/gradient_policy.hpp"
#include "protocol.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace baton::sim {

struct ComparisonConfig {
    SchedulerConfig scheduler;
    ProtocolConfig protocol; // interval, shapes, limit, tick, horizon (from/to set per phase)
    std::int64_t warmupEnd = 0; // first training probe
    std::int64_t split = 0; // train before, evaluate after
    std::int64_t evaluationEnd = 0; // no evaluation probe at or after this moment
    std::int64_t sampleEvery = 3 * 3600;
    double calibrationFraction = 0.2; // the last part of the training period, held out
    // Training probes end this long plus one limit before the split, so that their counterfactuals
    // stay (mostly) before it: a day, or half the limit when that is shorter (a short trace).
    std::int64_t trainingMargin = 86400;
    // Steps of 0.05: the held-out overlap grows several-fold between neighbouring tenths, so a coarser
    // grid leaves the overlap budget far from binding.
    std::vector<double> quantileGrid { 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65,
        0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98 };
    std::vector<int> persistGrid { 1 }; // ticks a crossing must last ({1, 10, 30} chose 1 on ls6)
    double tolerance = 600;
    double handoverSeconds = 60;
    // checkpoint-aware's quantile rule keeps the mean raw overlap (successor start before the
    // predecessor's limit) within a budget on the held-out training probes. By default the budget is the
    // overlap Mirage's `avg` baseline spends on those same probes: the rule may start successors as early
    // as avg does on average, and must make better use of it (fewer gaps). Otherwise this many seconds.
    // The policy also takes avg's ticks (CheckpointAwarePolicy), which the budget does not bound.
    bool overlapBudgetFromAvg = true;
    double overlapBudgetSeconds = 1800;
    // predict's q on the held-out training probes. By default in the restated target's terms: the most
    // successors within the tolerance, with a mean raw overlap within predictOverlapBudgetSeconds
    // (chooseMostWithin). With `meanInterruption`, Mirage's: the least mean |interruption|.
    bool predictMeanInterruption = false;
    double predictOverlapBudgetSeconds = 1800;
    // predict's rule (in the target's terms): for each probe size, whichever candidate of the quantile
    // rule and of the window rule (WindowPolicy, tau from windowGrid) places the most held-out successors
    // within the tolerance; or, with predictPerShape false, the quantile rule with one q for all sizes.
    bool predictPerShape = true;
    std::vector<double> windowGrid { 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85 };
    TrainOptions training;
    // baton's chain metric on the evaluation period (runChains): a chain per policy from every probe
    // moment before chainEnd, so that each chain runs on the trace's queue rather than a drained one.
    bool chains = true;
    ChainConfig chain;
    std::int64_t chainEnd = 0;
    // `policy-gradient` (opt-in): trained on the training period's probes, decisions every 10 min in the
    // last 24 h of the predecessor; its seed is training.seed.
    GradientOptions gradient;
    std::vector<std::string> policies { livePolicyNames.begin(), livePolicyNames.end() };
    // The metrics of a stored model (`--db-model`): the learned policies then decide by the rules
    // stored with it, as batond does, instead of rules chosen anew on this trace's training period.
    nlohmann::json storedModelMetrics;
};

struct PolicyRow {
    std::string name;
    double q = std::nan(""); // chosen quantile, for learned policies with one quantile rule
    int persist = 0; // chosen persistence in ticks, for learned policies with one quantile rule
    std::vector<ShapeRulesPolicy::ForShape> rules; // predict's rules per probe size, when chosen so
    InterruptionMetrics metrics;
    std::vector<std::optional<std::int64_t>> interruptions;
    // Over the successors that started: the share that backfill started with a limit lowered towards
    // the --time-min (ProtocolConfig::successorMinLimit), and the mean limit granted, in seconds.
    double fractionShortened = 0;
    double meanGrantedLimit = 0;
    std::optional<ChainMetrics> chain; // with ComparisonConfig::chains, for policies (not the bound)
    std::vector<ChainOutcome> chains;
};

// One candidate setting of a learned policy on the held-out end of the training period, over all its
// probes (nodes 0) or those of one size.
struct CandidateRow {
    DecisionRule rule;
    int nodes = 0;
    double symmetricCost = 0, handoverCost = 0;
    InterruptionMetrics metrics;
};

struct Comparison {
    std::vector<PolicyRow> rows;
    std::vector<CandidateRow> candidates; // what chose the quantiles
    std::optional<PredictorMetrics> predictor;
    WaitOffset predictorOffset = WaitOffset::None; // what the predictor's trees are relative to
    std::size_t trainingSamples = 0;
    std::size_t evaluationProbes = 0;
    double overlapBudget = 0; // the budget checkpoint-aware's choice used, seconds
    bool rulesStored = false; // the learned policies' rules came with the model (storedModelMetrics)
    std::optional<GradientTraining> gradient; // with the policy-gradient policy
    double gradientEpisodeSeconds = 0; // recording its training episodes (the training is in gradient)
    std::size_t chainStarts = 0; // probe moments × shapes whose first chain job started
    double sampleSeconds = 0, trainSeconds = 0, calibrateSeconds = 0, evaluateSeconds = 0, chainSeconds = 0;
};

// The median recorded-priority input of the jobs submitted before `before`: what probe jobs get.
double medianRecordedPriority(const std::vector<Job>& trace, std::int64_t before);

// Defaults derived from the trace itself: warm-up of `warmup` seconds (a week) after the first job, the
// split in the middle when none is given, evaluation ending two limits before the last submission,
// chains starting no later than their compute plus one limit before it, probes with the median
// recorded priority of the jobs before the split. `limit` is the probe jobs' (48 h); a short trace
// needs both shorter.
ComparisonConfig defaultComparisonConfig(
    const std::vector<Job>& trace, std::int64_t warmup = 7 * 86400, std::int64_t limit = 48 * 3600);

// `pretrained`: use this predictor instead of training one. `trained` receives the predictor used.
Comparison runComparison(std::shared_ptr<const std::vector<Job>> trace, const ComparisonConfig& config,
    std::shared_ptr<const WaitPredictor> pretrained, std::shared_ptr<const WaitPredictor>* trained = nullptr);

} // namespace baton::sim
