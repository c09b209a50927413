// Events, decisions, models and predictions.
#include "repositories.hpp"

namespace baton::db {

namespace {

constexpr Statement insertEvent { "insert_event",
    "INSERT INTO events (idempotency_key, kind, chain_name, slurm_job_id, payload) VALUES ($1, $2, $3, $4, "
    "$5)"
    " ON CONFLICT (idempotency_key) DO NOTHING RETURNING id",
    true };
constexpr Statement selectEventByKey { "select_event_by_key",
    "SELECT id, idempotency_key, kind, chain_name, slurm_job_id, payload, extract(epoch FROM "
    "received_at)::bigint"
    " FROM events WHERE idempotency_key = $1",
    true };

constexpr Statement insertDecision { "insert_decision",
    "INSERT INTO decisions (chain_id, decided_at, policy, action, inputs, outcome)"
    " VALUES ($1, to_timestamp($2), $3, $4, $5, $6) RETURNING id" };
#define BATON_DECISION_COLUMNS                                                                               \
    "SELECT id, chain_id, extract(epoch FROM decided_at)::bigint, policy, action, inputs, outcome FROM "     \
    "decisions "
constexpr Statement selectDecision { "select_decision", BATON_DECISION_COLUMNS "WHERE id = $1", true };
constexpr Statement selectDecisionsOfChain { "select_decisions_of_chain",
    BATON_DECISION_COLUMNS "WHERE chain_id = $1 ORDER BY decided_at, id", true };
#undef BATON_DECISION_COLUMNS

constexpr Statement insertModel { "insert_model",
    "INSERT INTO models (name, version, kind, path, params, metrics) VALUES ($1, $2, $3, $4, $5, $6) "
    "RETURNING id" };
#define BATON_MODEL_COLUMNS                                                                                  \
    "SELECT id, name, version, kind, path, extract(epoch FROM trained_at)::bigint, params, metrics FROM "    \
    "models "
constexpr Statement selectModel { "select_model", BATON_MODEL_COLUMNS "WHERE id = $1", true };
constexpr Statement selectLatestModel { "select_latest_model",
    BATON_MODEL_COLUMNS "WHERE name = $1 ORDER BY version DESC LIMIT 1", true };
#undef BATON_MODEL_COLUMNS

constexpr Statement insertPrediction { "insert_prediction",
    "INSERT INTO predictions (chain_id, slurm_job_id, model_id, predicted_at, quantile, predicted_wait_s,"
    " actual_wait_s) VALUES ($1, $2, $3, to_timestamp($4), $5, $6, $7) RETURNING id" };
constexpr Statement selectPrediction { "select_prediction",
    "SELECT id, chain_id, slurm_job_id, model_id, extract(epoch FROM predicted_at)::bigint, quantile,"
    " predicted_wait_s, actual_wait_s FROM predictions WHERE id = $1",
    true };
constexpr Statement updatePredictionActual { "update_prediction_actual",
    "UPDATE predictions SET actual_wait_s = $2 WHERE id = $1", true };

Event eventAt(const Result& r, int row)
{
    return Event { r.int64(row, 0), std::string(r.text(row, 1)), std::string(r.text(row, 2)),
        r.optText(row, 3), r.optInt64(row, 4), r.json(row, 5), r.int64(row, 6) };
}

Decision decisionAt(const Result& r, int row)
{
    return Decision { r.int64(row, 0), r.int64(row, 1), r.int64(row, 2), std::string(r.text(row, 3)),
        std::string(r.text(row, 4)), r.json(row, 5), r.optText(row, 6) };
}

Model modelAt(const Result& r, int row)
{
    return Model { r.int64(row, 0), std::string(r.text(row, 1)), static_cast<std::int32_t>(r.int64(row, 2)),
        std::string(r.text(row, 3)), r.optText(row, 4), r.int64(row, 5), r.json(row, 6), r.json(row, 7) };
}

Prediction predictionAt(const Result& r, int row)
{
    return Prediction { r.int64(row, 0), r.optInt64(row, 1), r.optInt64(row, 2), r.optInt64(row, 3),
        r.int64(row, 4), r.optReal(row, 5), r.real(row, 6), r.optReal(row, 7) };
}

} // namespace

bool EventRepository::insert(const Event& e)
{
    return connection_
               .exec(insertEvent, Params(e.idempotencyKey, e.kind, e.chainName, e.slurmJobId, e.payload))
               .rows()
        == 1;
}

std::optional<Event> EventRepository::findByKey(std::string_view key)
{
    return connection_.exec(selectEventByKey, Params(key)).first(eventAt);
}

std::int64_t DecisionRepository::insert(const Decision& d)
{
    return connection_
        .exec(insertDecision, Params(d.chainId, d.decidedAt, d.policy, d.action, d.inputs, d.outcome))
        .int64(0, 0);
}

std::optional<Decision> DecisionRepository::get(std::int64_t id)
{
    return connection_.exec(selectDecision, Params(id)).first(decisionAt);
}

std::vector<Decision> DecisionRepository::forChain(std::int64_t chainId)
{
    return connection_.exec(selectDecisionsOfChain, Params(chainId)).all(decisionAt);
}

std::int64_t ModelRepository::insert(const Model& m)
{
    return connection_.exec(insertModel, Params(m.name, m.version, m.kind, m.path, m.params, m.metrics))
        .int64(0, 0);
}

std::optional<Model> ModelRepository::get(std::int64_t id)
{
    return connection_.exec(selectModel, Params(id)).first(modelAt);
}

std::optional<Model> ModelRepository::latest(std::string_view name)
{
    return connection_.exec(selectLatestModel, Params(name)).first(modelAt);
}

std::int64_t PredictionRepository::insert(const Prediction& p)
{
    return connection_
        .exec(insertPrediction,
            Params(p.chainId, p.slurmJobId, p.modelId, p.predictedAt, p.quantile, p.predictedWaitSeconds,
                p.actualWaitSeconds))
        .int64(0, 0);
}

std::optional<Prediction> PredictionRepository::get(std::int64_t id)
{
    return connection_.exec(selectPrediction, Params(id)).first(predictionAt);
}

bool PredictionRepository::setActual(std::int64_t id, double actualWaitSeconds)
{
    return connection_.exec(updatePredictionActual, Params(id, actualWaitSeconds)).affected() == 1;
}

} // namespace baton::db
