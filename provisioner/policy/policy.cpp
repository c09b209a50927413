#include "policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

namespace baton::sim {

namespace {

// The predictor's mean log-wait of each tick: the caller's, or one batch of inference.
std::vector<double> batchMeanLog(const WaitPredictor& predictor, std::span<const DecisionPoint> points)
{
    std::vector<double> meanLog;
    meanLog.reserve(points.size());
    for (const auto& p : points)
        meanLog.push_back(p.meanLogWait);
    if (!points.empty() && std::isnan(points.front().meanLogWait)) {
        std::vector<Features> rows;
        rows.reserve(points.size());
        for (const auto& p : points)
            rows.push_back(p.features);
        meanLog = predictor.predictLog(rows);
    }
    return meanLog;
}

} // namespace

bool isLivePolicy(std::string_view name)
{
    return std::find(livePolicyNames.begin(), livePolicyNames.end(), name) != livePolicyNames.end();
}

std::string livePolicyList()
{
    std::string list;
    for (const std::string_view name : livePolicyNames)
        list += (list.empty() ? "" : ", ") + std::string(name);
    return list;
}

bool isLearnedPolicy(std::string_view name)
{
    return name == "predict" || name == "checkpoint-aware";
}

std::int64_t submitLeadFor(std::int64_t lead, std::int64_t limitSeconds)
{
    return limitSeconds > 0 ? std::min(lead, limitSeconds / 2) : lead;
}

std::size_t firstSubmitWithLead(
    const Policy& policy, std::span<const DecisionPoint> points, std::int64_t lead)
{
    const std::size_t first = policy.firstSubmit(points);
    if (lead <= 0 || policy.name() == "reactive")
        return first;
    for (std::size_t i = 0; i < first; ++i)
        if (points[i].remaining <= lead)
            return i;
    return first;
}

std::size_t ReactivePolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    return points.size();
}

std::size_t AveragePolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    for (std::size_t i = 0; i < points.size(); ++i)
        if (points[i].recentMeanWait >= static_cast<double>(points[i].remaining))
            return i;
    return points.size();
}

QuantilePolicy::QuantilePolicy(std::string name, std::shared_ptr<const WaitPredictor> predictor, double q,
    double marginSeconds, int persist)
    : name_(std::move(name))
    , predictor_(std::move(predictor))
    , q_(q)
    , margin_(marginSeconds)
    , persist_(persist)
{
    if (persist < 1)
        throw std::invalid_argument("a crossing must persist for at least one tick");
    if (!predictor_)
        throw std::invalid_argument("a quantile policy needs a predictor");
    if (!(q > 0 && q < 1))
        throw std::invalid_argument("the quantile must lie strictly between 0 and 1");
}

std::size_t QuantilePolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    const std::vector<double> meanLog = batchMeanLog(*predictor_, points);
    int run = 0;
    for (std::size_t i = 0; i < points.size(); ++i) {
        const bool crossed = predictor_->quantileSeconds(meanLog[i], q_)
            >= static_cast<double>(points[i].remaining) - margin_;
        run = crossed ? run + 1 : 0;
        if (run >= persist_)
            return i;
    }
    return points.size();
}

CheckpointAwarePolicy::CheckpointAwarePolicy(
    std::shared_ptr<const WaitPredictor> predictor, double q, int persist, std::int64_t submitLead)
    : byQuantile_("checkpoint-aware", std::move(predictor), q, 0.0, persist)
    , submitLead_(submitLead)
{
}

std::size_t CheckpointAwarePolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    const std::size_t byAverage = AveragePolicy().firstSubmit(points);
    // The ticks of one call follow one running job, so its wait and limit are the same on all of them.
    if (!points.empty()
        && points.front().lastSuccessorWait
            <= static_cast<double>(submitLeadFor(submitLead_, points.front().limit)))
        return byAverage;
    return std::min(byQuantile_.firstSubmit(points), byAverage);
}

WindowPolicy::WindowPolicy(
    std::string name, std::shared_ptr<const WaitPredictor> predictor, double tau, double toleranceSeconds)
    : name_(std::move(name))
    , predictor_(std::move(predictor))
    , tau_(tau)
    , tolerance_(toleranceSeconds)
{
    if (!predictor_)
        throw std::invalid_argument("a window policy needs a predictor");
    if (!(tau > 0 && tau < 1))
        throw std::invalid_argument("the window probability must lie strictly between 0 and 1");
    if (!(toleranceSeconds > 0))
        throw std::invalid_argument("the window tolerance must be positive");
}

std::size_t WindowPolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    const std::vector<double> meanLog = batchMeanLog(*predictor_, points);
    for (std::size_t i = 0; i < points.size(); ++i) {
        const double remaining = static_cast<double>(points[i].remaining);
        // A window that reaches below zero holds every wait up to its top, a start at once included.
        const double below = remaining > tolerance_
            ? predictor_->probabilityAtMost(meanLog[i], remaining - tolerance_)
            : 0.0;
        if (predictor_->probabilityAtMost(meanLog[i], remaining + tolerance_) - below >= tau_)
            return i;
    }
    return points.size();
}

std::string DecisionRule::describe() const
{
    char text[64];
    std::snprintf(text, sizeof text, "%s %s=%.3g", kindName(), kind == Kind::Window ? "tau" : "q", value);
    std::string out = text;
    if (kind == Kind::Quantile && persist > 1)
        out += " over " + std::to_string(persist) + " ticks";
    return out;
}

std::unique_ptr<Policy> makeRulePolicy(const std::string& name,
    std::shared_ptr<const WaitPredictor> predictor, const DecisionRule& rule, double toleranceSeconds)
{
    if (rule.kind == DecisionRule::Kind::Window)
        return std::make_unique<WindowPolicy>(name, std::move(predictor), rule.value, toleranceSeconds);
    return std::make_unique<QuantilePolicy>(name, std::move(predictor), rule.value, 0.0, rule.persist);
}

std::unique_ptr<Policy> makeLearnedPolicy(const std::string& name,
    std::shared_ptr<const WaitPredictor> predictor, const DecisionRule& all, const std::vector<ShapeRulesPolicy::ForShape>& perSize, double toleranceSeconds,
    std::int64_t submitLead)
{
    if (name == "checkpoint-aware") {
        if (all.kind != DecisionRule::Kind::Quantile || !perSize.empty())
            throw std::invalid_argument("checkpoint-aware takes one quantile rule, not " + all.describe()
                + (perSize.empty() ? "" : " or rules per size"));
        return std::make_unique<CheckpointAwarePolicy>(
            std::move(predictor), all.value, all.persist, submitLead);
    }
    if (name != "predict")
        throw std::invalid_argument("'" + name + "' is not a learned policy");
    if (!perSize.empty())
        return std::make_unique<ShapeRulesPolicy>(name, std::move(predictor), perSize, toleranceSeconds);
    return makeRulePolicy(name, std::move(predictor), all, toleranceSeconds);
}

ShapeRulesPolicy::ShapeRulesPolicy(std::string name, std::shared_ptr<const WaitPredictor> predictor,
    std::vector<ForShape> rules, double toleranceSeconds)
    : name_(std::move(name))
    , rules_(std::move(rules))
{
    if (rules_.empty())
        throw std::invalid_argument("a per-size policy needs at least one rule");
    std::sort(
        rules_.begin(), rules_.end(), [](const ForShape& a, const ForShape& b) { return a.nodes < b.nodes; });
    for (const ForShape& r : rules_) {
        if (r.nodes < 1)
            throw std::invalid_argument("a rule's node count must be positive");
        policies_.push_back(makeRulePolicy(name_, predictor, r.rule, toleranceSeconds));
    }
}

const Policy& ShapeRulesPolicy::ruleFor(double nodes) const
{
    std::size_t best = 0;
    double bestDistance = 0;
    for (std::size_t i = 0; i < rules_.size(); ++i) {
        const double distance = std::abs(std::log(std::max(nodes, 1.0) / rules_[i].nodes));
        if (i == 0 || distance < bestDistance) {
            best = i;
            bestDistance = distance;
        }
    }
    return *policies_[best];
}

std::size_t ShapeRulesPolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    if (points.empty())
        return 0;
    // The ticks of one call are one successor's: one size.
    return ruleFor(at(points.front().features, Feature::Nodes)).firstSubmit(points);
}

std::string describeRules(const std::vector<ShapeRulesPolicy::ForShape>& rules)
{
    std::string out;
    for (const auto& r : rules)
        out += (out.empty() ? "" : "; ") + std::to_string(r.nodes) + (r.nodes == 1 ? " node: " : " nodes: ")
            + r.rule.describe();
    return out;
}

nlohmann::json rulesToJson(const std::vector<ShapeRulesPolicy::ForShape>& rules)
{
    nlohmann::json doc = nlohmann::json::array();
    for (const auto& r : rules)
        doc.push_back({ { "nodes", r.nodes }, { "rule", r.rule.kindName() }, { "value", r.rule.value },
            { "persist", r.rule.persist } });
    return doc;
}

std::vector<ShapeRulesPolicy::ForShape> rulesFromJson(const nlohmann::json& doc)
{
    if (!doc.is_array())
        throw std::invalid_argument("rules must be a list");
    std::vector<ShapeRulesPolicy::ForShape> rules;
    for (const auto& item : doc) {
        const auto nodes = item.is_object() ? item.find("nodes") : item.end();
        const auto kind = item.is_object() ? item.find("rule") : item.end();
        const auto value = item.is_object() ? item.find("value") : item.end();
        if (nodes == item.end() || !nodes->is_number_integer() || kind == item.end() || !kind->is_string()
            || value == item.end() || !value->is_number())
            throw std::invalid_argument("a rule needs integer nodes, a rule name and a number value");
        ShapeRulesPolicy::ForShape r;
        r.nodes = nodes->get<int>();
        const std::string name = kind->get<std::string>();
        if (name != "window" && name != "quantile")
            throw std::invalid_argument("unknown rule '" + name + "' (known: quantile, window)");
        r.rule.kind = name == "window" ? DecisionRule::Kind::Window : DecisionRule::Kind::Quantile;
        r.rule.value = value->get<double>();
        if (!(r.rule.value > 0 && r.rule.value < 1))
            throw std::invalid_argument("a rule's value must lie strictly between 0 and 1");
        const auto persist = item.find("persist");
        r.rule.persist = persist != item.end() && persist->is_number_integer() ? persist->get<int>() : 1;
        if (r.nodes < 1 || r.rule.persist < 1)
            throw std::invalid_argument("a rule's nodes and persistence must be positive");
        rules.push_back(r);
    }
    return rules;
}

} // namespace baton::sim
