#include "comparison.hpp"

#include "validation.hpp"

#include "policy/model_store.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace baton::sim {

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Fills in how the limits of the successors that started were granted.
void summarizeGrants(PolicyRow& row, const std::vector<std::int64_t>& granted, std::int64_t limit)
{
    std::size_t started = 0, shortened = 0;
    double sum = 0;
    for (std::int64_t g : granted) {
        if (g <= 0)
            continue;
        ++started;
        shortened += g < limit ? 1 : 0;
        sum += static_cast<double>(g);
    }
    if (started == 0)
        return;
    row.fractionShortened = static_cast<double>(shortened) / static_cast<double>(started);
    row.meanGrantedLimit = sum / static_cast<double>(started);
}

std::vector<std::optional<std::int64_t>> column(const ProtocolResult& r, std::size_t k)
{
    std::vector<std::optional<std::int64_t>> x;
    x.reserve(r.probes.size());
    for (const auto& p : r.probes)
        x.push_back(p.outcomes[k].interruption);
    return x;
}

} // namespace

double medianRecordedPriority(const std::vector<Job>& trace, std::int64_t before)
{
    std::vector<double> p;
    for (const auto& j : trace)
        if (j.submit < before)
            p.push_back(j.recordedPriority);
    return quantile(std::move(p), 0.5);
}

ComparisonConfig defaultComparisonConfig(
    const std::vector<Job>& trace, std::int64_t warmup, std::int64_t limit)
{
    if (warmup < 0 || limit <= 0)
        throw std::invalid_argument("the warm-up must not be negative and the limit must be positive");
    if (trace.empty())
        throw std::invalid_argument("the trace has no jobs");
    ComparisonConfig c;
    std::int64_t first = trace.front().submit;
    std::int64_t firstStart = -1;
    for (const auto& j : trace)
        if (j.recordedStart >= 0 && (firstStart < 0 || j.recordedStart < firstStart))
            firstStart = j.recordedStart;
    // Jobs submitted before the cluster ran anything tell nothing about its queue.
    first = std::max(first, firstStart);
    const std::int64_t last = trace.back().submit;
    c.protocol.limit = limit;
    c.trainingMargin = std::min<std::int64_t>(86400, limit / 2);
    c.warmupEnd = first + warmup;
    c.split = c.warmupEnd + (last - c.warmupEnd) / 2;
    c.evaluationEnd = last - 2 * c.protocol.limit;
    c.chainEnd = last - c.chain.compute - c.protocol.limit;
    c.protocol.probePriority = medianRecordedPriority(trace, c.split);
    return c;
}

namespace {

// The decision rules the learned policies use, chosen on the held-out end of the training period.
struct ChosenRules {
    double qCheckpoint = 0.5;
    int persistCheckpoint = 1;
    DecisionRule predictAll; // one quantile rule for every size
    std::vector<ShapeRulesPolicy::ForShape> predictRules; // or one rule per size
};

// The learned policies' rules as stored with the model, when every learned policy compared has one.
bool storedRules(const ComparisonConfig& config, ChosenRules& chosen)
{
    if (!config.storedModelMetrics.is_object())
        return false;
    for (const auto& name : config.policies) {
        if (!isLearnedPolicy(name))
            continue;
        const auto rule = storedRuleFor(config.storedModelMetrics, name);
        if (!rule || (name == "checkpoint-aware" && !rule->q)) // checkpoint-aware: a quantile rule
            return false;
        if (name == "checkpoint-aware") {
            chosen.qCheckpoint = *rule->q;
            chosen.persistCheckpoint = rule->persist;
        } else if (!rule->perSize.empty()) {
            chosen.predictRules = rule->perSize;
        } else {
            chosen.predictAll = DecisionRule { DecisionRule::Kind::Quantile, *rule->q, rule->persist };
        }
    }
    return true;
}

// The candidates: every quantile and persistence, then (for predict's per-size choice) every window.
std::vector<DecisionRule> candidateRules(const ComparisonConfig& config, std::size_t& quantileCount)
{
    std::vector<DecisionRule> rules;
    for (double q : config.quantileGrid)
        for (int persist : config.persistGrid)
            rules.push_back({ DecisionRule::Kind::Quantile, q, persist });
    quantileCount = rules.size();
    if (config.predictPerShape && !config.predictMeanInterruption)
        for (double tau : config.windowGrid)
            rules.push_back({ DecisionRule::Kind::Window, tau, 1 });
    return rules;
}

// Chooses the learned policies' rules on the held-out end of the training period, under each policy's
// cost: checkpoint-aware's among the quantile candidates, predict's (per size) among all. The candidates'
// figures go to out.candidates.
ChosenRules chooseRules(std::shared_ptr<const std::vector<Job>> trace, const ComparisonConfig& config,
    std::shared_ptr<const WaitPredictor> predictor, std::int64_t from, std::int64_t to, Comparison& out)
{
    std::size_t quantileCount = 0;
    const auto rules = candidateRules(config, quantileCount);
    std::vector<std::unique_ptr<Policy>> candidates;
    std::vector<const Policy*> ptrs;
    for (const DecisionRule& rule : rules) {
        candidates.push_back(makeRulePolicy("candidate", predictor, rule, config.tolerance));
        ptrs.push_back(candidates.back().get());
    }
    AveragePolicy avg; // its overlap on these probes is checkpoint-aware's default budget
    ptrs.push_back(&avg);
    ProtocolConfig pc = config.protocol;
    pc.from = from;
    pc.to = to;
    pc.annotate = predictor;
    const auto r = runProtocol(trace, config.scheduler, pc, ptrs);
    const auto unstarted = static_cast<double>(config.protocol.horizon);
    const auto limit = static_cast<double>(config.protocol.limit);
    // The columns of the probes of one size (0: all).
    const auto columnsOf = [&](int nodes) {
        std::vector<std::vector<std::optional<std::int64_t>>> columns(rules.size());
        for (const auto& probe : r.probes)
            if (nodes == 0 || probe.nodes == nodes)
                for (std::size_t k = 0; k < rules.size(); ++k)
                    columns[k].push_back(probe.outcomes[k].interruption);
        return columns;
    };
    const auto record = [&](const auto& columns, int nodes) {
        for (std::size_t k = 0; k < rules.size(); ++k)
            out.candidates.push_back({ rules[k], nodes, symmetricCost(columns[k], unstarted),
                handoverCost(columns[k], unstarted, config.handoverSeconds, limit),
                summarize(columns[k], config.tolerance, config.handoverSeconds) });
    };
    const auto mostWithin = [&](const auto& columns) {
        return rules[chooseMostWithin(
            columns, config.tolerance, unstarted, config.predictOverlapBudgetSeconds)];
    };
    ChosenRules chosen;
    const auto all = columnsOf(0);
    record(all, 0);
    const std::span<const std::vector<std::optional<std::int64_t>>> quantileColumns(
        all.data(), quantileCount);
    if (config.predictMeanInterruption) {
        // The first rows recorded are the candidates over all probes, in the order of `rules`.
        const auto quantileRows = std::span(out.candidates).first(quantileCount);
        chosen.predictAll = std::min_element(
            quantileRows.begin(), quantileRows.end(), [](const CandidateRow& a, const CandidateRow& b) {
                return a.symmetricCost < b.symmetricCost;
            })->rule;
    } else {
        chosen.predictAll = mostWithin(quantileColumns);
    }
    if (config.predictPerShape && !config.predictMeanInterruption) {
        std::vector<int> shapes = config.protocol.shapes;
        std::sort(shapes.begin(), shapes.end());
        shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
        for (int nodes : shapes) {
            const auto columns = columnsOf(nodes);
            if (columns.front().empty())
                continue; // no held-out probe of this size: it follows the nearest size's rule
            record(columns, nodes);
            chosen.predictRules.push_back({ nodes, mostWithin(columns) });
        }
    }
    out.overlapBudget
        = config.overlapBudgetFromAvg ? meanOverlap(column(r, rules.size())) : config.overlapBudgetSeconds;
    const DecisionRule& checkpoint = rules[chooseUnderOverlapBudget(
        quantileColumns, unstarted, config.handoverSeconds, limit, out.overlapBudget)];
    chosen.qCheckpoint = checkpoint.value;
    chosen.persistCheckpoint = checkpoint.persist;
    return chosen;
}

// The wait predictor trained on the samples of the training period's probes.
std::shared_ptr<const WaitPredictor> trainPredictor(std::shared_ptr<const std::vector<Job>> trace,
    const ComparisonConfig& config, std::int64_t trainEnd, Comparison& out)
{
    auto t0 = std::chrono::steady_clock::now();
    ProtocolConfig pc = config.protocol;
    pc.from = config.warmupEnd;
    pc.to = trainEnd;
    pc.sampleEvery = config.sampleEvery;
    const auto samples = runProtocol(trace, config.scheduler, pc, {}).samples;
    out.trainingSamples = samples.size();
    out.sampleSeconds = secondsSince(t0);
    t0 = std::chrono::steady_clock::now();
    TrainOptions opts = config.training;
    opts.heldOutFraction = config.calibrationFraction;
    auto predictor = std::make_shared<const WaitPredictor>(WaitPredictor::train(samples, opts));
    out.trainSeconds = secondsSince(t0);
    return predictor;
}

// The policy-gradient policy trained on the training period's episodes.
GradientPolicy trainGradient(std::shared_ptr<const std::vector<Job>> trace, const ComparisonConfig& config,
    std::int64_t trainEnd, Comparison& out)
{
    auto t0 = std::chrono::steady_clock::now();
    ProtocolConfig pc = config.protocol;
    pc.from = config.warmupEnd;
    pc.to = trainEnd;
    const auto episodes
        = collectEpisodes(trace, config.scheduler, pc, config.gradient.decisionEvery, config.gradient.window);
    out.gradientEpisodeSeconds = secondsSince(t0);
    GradientOptions options = config.gradient;
    options.seed = config.training.seed;
    options.unstartedSeconds = static_cast<double>(config.protocol.horizon);
    GradientTraining report;
    auto policy = GradientPolicy::train(episodes, options, &report);
    out.gradient = std::move(report);
    return policy;
}

// The evaluated policies by name, in the order given; "oracle" is not a policy (the protocol finds the
// hindsight bound) and only sets `oracle`.
std::vector<std::unique_ptr<Policy>> makePolicies(const ComparisonConfig& config,
    std::shared_ptr<const WaitPredictor> predictor, const ChosenRules& chosen,
    const std::optional<GradientPolicy>& gradient, bool& oracle)
{
    std::vector<std::unique_ptr<Policy>> policies;
    for (const auto& name : config.policies) {
        if (name == "reactive")
            policies.push_back(std::make_unique<ReactivePolicy>());
        else if (name == "avg")
            policies.push_back(std::make_unique<AveragePolicy>());
        else if (name == "predict")
            policies.push_back(makeLearnedPolicy(name, predictor, chosen.predictAll, chosen.predictRules,
                config.tolerance, 0));
        else if (name == "checkpoint-aware")
            policies.push_back(makeLearnedPolicy(name, predictor,
                { DecisionRule::Kind::Quantile, chosen.qCheckpoint, chosen.persistCheckpoint }, {},
                config.tolerance, config.protocol.submitLead));
        else if (name == "policy-gradient")
            policies.push_back(std::make_unique<GradientPolicy>(*gradient));
        else if (name == "oracle")
            oracle = true;
        else
            throw std::invalid_argument("unknown policy '" + name
                + "' (known: reactive, avg, predict, checkpoint-aware, policy-gradient, oracle)");
    }
    return policies;
}

// One row per evaluated policy (the hindsight bound included) from the evaluation's probes.
void addRows(
    const ProtocolResult& r, const ComparisonConfig& config, const ChosenRules& chosen, Comparison& out)
{
    std::size_t k = 0;
    for (const auto& name : config.policies) {
        PolicyRow row;
        row.name = name;
        if (row.name == "predict" && !chosen.predictRules.empty()) {
            row.rules = chosen.predictRules;
        } else if (row.name == "predict") {
            row.q = chosen.predictAll.value;
            row.persist = chosen.predictAll.persist;
        } else if (row.name == "checkpoint-aware") {
            row.q = chosen.qCheckpoint;
            row.persist = chosen.persistCheckpoint;
        }
        std::vector<std::int64_t> granted;
        if (name == "oracle") {
            for (const auto& p : r.probes) {
                row.interruptions.push_back(p.oracle ? p.oracle->interruption : std::nullopt);
                granted.push_back(p.oracle ? p.oracle->grantedLimit : 0);
            }
        } else {
            for (const auto& p : r.probes)
                granted.push_back(p.outcomes[k].grantedLimit);
            row.interruptions = column(r, k++);
        }
        summarizeGrants(row, granted, config.protocol.limit);
        row.metrics = summarize(row.interruptions, config.tolerance, config.handoverSeconds);
        out.rows.push_back(std::move(row));
    }
}

// Chains of every policy from each probe moment of the evaluation period.
void addChains(std::shared_ptr<const std::vector<Job>> trace, const ComparisonConfig& config,
    const std::vector<const Policy*>& policies, Comparison& out)
{
    const auto t0 = std::chrono::steady_clock::now();
    ProtocolConfig cc = config.protocol;
    cc.from = config.split;
    cc.to = std::min(config.evaluationEnd, config.chainEnd);
    const auto chains = runChains(trace, config.scheduler, cc, config.chain, policies);
    for (std::size_t i = 0; i < policies.size(); ++i)
        for (auto& row : out.rows)
            if (row.name == chains.policyNames[i]) {
                row.chains = chains.chains[i];
                row.chain = summarizeChains(row.chains);
            }
    out.chainStarts = chains.chains.front().size();
    out.chainSeconds = secondsSince(t0);
}

} // namespace

Comparison runComparison(std::shared_ptr<const std::vector<Job>> trace, const ComparisonConfig& config,
    std::shared_ptr<const WaitPredictor> pretrained, std::shared_ptr<const WaitPredictor>* trained)
{
    if (!(config.warmupEnd < config.split && config.split < config.evaluationEnd))
        throw std::invalid_argument("need warm-up end < split < evaluation end");
    Comparison out;
    const bool learned = std::any_of(config.policies.begin(), config.policies.end(),
        [](const std::string& name) { return isLearnedPolicy(name); });
    // Training probes stop early enough that their counterfactuals stay (mostly) before the split.
    const std::int64_t trainEnd = config.split - config.protocol.limit - config.trainingMargin;
    const std::int64_t calibrationFrom = trainEnd
        - static_cast<std::int64_t>(
            config.calibrationFraction * static_cast<double>(trainEnd - config.warmupEnd));

    std::shared_ptr<const WaitPredictor> predictor = pretrained;
    if (learned && !predictor)
        predictor = trainPredictor(trace, config, trainEnd, out);
    if (predictor) {
        out.predictor = predictor->metrics();
        out.predictorOffset = predictor->offset();
    }
    if (trained)
        *trained = predictor;
    ChosenRules chosen;
    out.rulesStored = learned && storedRules(config, chosen);
    if (learned && !out.rulesStored) {
        const auto t0 = std::chrono::steady_clock::now();
        chosen = chooseRules(trace, config, predictor, calibrationFrom, trainEnd, out);
        out.calibrateSeconds = secondsSince(t0);
    }
    std::optional<GradientPolicy> gradient;
    if (std::find(config.policies.begin(), config.policies.end(), "policy-gradient") != config.policies.end())
        gradient.emplace(trainGradient(trace, config, trainEnd, out));

    const auto t0 = std::chrono::steady_clock::now();
    bool oracle = false;
    const auto policies = makePolicies(config, predictor, chosen, gradient, oracle);
    std::vector<const Policy*> ptrs;
    for (const auto& p : policies)
        ptrs.push_back(p.get());
    ProtocolConfig pc = config.protocol;
    pc.from = config.split;
    pc.to = config.evaluationEnd;
    pc.annotate = learned ? predictor : nullptr;
    pc.oracle = oracle;
    const auto r = runProtocol(trace, config.scheduler, pc, ptrs);
    out.evaluationProbes = r.probes.size();
    addRows(r, config, chosen, out);
    out.evaluateSeconds = secondsSince(t0);
    if (config.chains && !ptrs.empty())
        addChains(trace, config, ptrs, out);
    return out;
}

} // namespace baton::sim
