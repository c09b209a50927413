#include "model_store.hpp"

#include "db/model_table.hpp"

#include <stdexcept>

namespace baton::sim {

StoredModel storeModel(db::Connection& connection, const WaitPredictor& predictor, const std::string& name,
    const std::optional<std::string>& path, const nlohmann::json& extraMetrics)
{
    db::ModelTable models(connection);
    db::Model m;
    m.name = name;
    const auto previous = models.latest(name);
    m.version = previous ? previous->version + 1 : 1;
    m.kind = waitPredictorKind;
    m.path = path;
    const auto doc = predictor.toJson();
    m.params = { { "model", doc } };
    m.metrics = doc.at("metrics");
    if (extraMetrics.is_object())
        m.metrics.update(extraMetrics);
    return { models.insert(m), m.version };
}

db::Model latestStoredModel(db::Connection& connection, const std::string& name)
{
    auto m = db::ModelTable(connection).latest(name);
    if (!m)
        throw std::runtime_error("no model named '" + name + "' in the database");
    return std::move(*m);
}

WaitPredictor loadStoredModel(db::Connection& connection, const std::string& name)
{
    return predictorOf(latestStoredModel(connection, name));
}

WaitPredictor predictorOf(const db::Model& m)
{
    if (m.kind != waitPredictorKind || !m.params.contains("model"))
        throw std::runtime_error("model '" + m.name + "' is a " + m.kind + ", not a wait predictor");
    try {
        return WaitPredictor::fromJson(m.params.at("model"));
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error("model '" + m.name + "' in the database is malformed: " + e.what());
    }
}

std::optional<StoredRule> storedRuleFor(const nlohmann::json& metrics, const std::string& policy)
{
    const auto evaluation = metrics.find("evaluation");
    if (evaluation == metrics.end() || !evaluation->is_object())
        return std::nullopt;
    const auto row = evaluation->find(policy);
    if (row == evaluation->end() || !row->is_object())
        return std::nullopt;
    StoredRule rule;
    if (const auto rules = row->find("rules"); rules != row->end() && rules->is_array() && !rules->empty()) {
        try {
            rule.perSize = rulesFromJson(*rules);
        } catch (const std::invalid_argument& error) {
            rule.unreadable = error.what();
        }
    }
    if (const auto q = row->find("q"); q != row->end() && q->is_number())
        rule.q = q->get<double>();
    if (const auto persist = row->find("persist"); persist != row->end() && persist->is_number_integer()
        && persist->get<std::int64_t>() >= 1 && persist->get<std::int64_t>() <= 3600)
        rule.persist = persist->get<int>();
    if (rule.perSize.empty() && !rule.q)
        return std::nullopt;
    return rule;
}

double storedTolerance(const nlohmann::json& metrics)
{
    const auto stored = metrics.find("tolerance_s");
    return stored != metrics.end() && stored->is_number() ? stored->get<double>() : 600.0;
}

} // namespace baton::sim
