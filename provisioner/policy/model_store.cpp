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

WaitPredictor loadStoredModel(db::Connection& connection, const std::string& name)
{
    db::ModelTable models(connection);
    const auto m = models.latest(name);
    if (!m)
        throw std::runtime_error("no model named '" + name + "' in the database");
    return predictorOf(*m);
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

} // namespace baton::sim
