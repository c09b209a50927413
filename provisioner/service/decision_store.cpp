#include "decision_store.hpp"

namespace baton::service {

using Json = nlohmann::json;

namespace {

constexpr db::Statement insertDecisions { "decision_insert",
    "INSERT INTO decisions (chain_id, decided_at, policy, action, inputs, outcome)"
    " SELECT (d->>0)::bigint, to_timestamp($2), d->>1, d->>2, d->3, d->>4 FROM jsonb_array_elements($1::jsonb) d",
    true };
constexpr db::Statement selectPausedForJob { "decision_paused_for_job",
    "SELECT EXISTS (SELECT 1 FROM decisions WHERE chain_id = $1 AND action = 'pause'"
    " AND inputs @> jsonb_build_object('job_id', $2::bigint)) AS paused",
    true };
// Retention by the database's clock, a batch at a time (the time index finds them).
constexpr db::Statement pruneDecisions { "decision_prune",
    "DELETE FROM decisions WHERE id IN (SELECT id FROM decisions"
    " WHERE decided_at < now() - make_interval(days => $1) ORDER BY decided_at LIMIT $2)" };

} // namespace

void DecisionStore::record(std::int64_t chainId, const std::string& policy, const std::string& action,
    const Json& inputs, const std::string& outcome)
{
    recordMany({ DecisionInput { chainId, policy, action, inputs, outcome } });
}

void DecisionStore::recordMany(const std::vector<DecisionInput>& decisions)
{
    if (decisions.empty())
        return;
    Json rows = Json::array();
    for (const DecisionInput& d : decisions)
        rows.push_back(Json::array({ d.chainId, d.policy, d.action, d.inputs, d.outcome }));
    connection_.exec(insertDecisions, db::Params(rows, db::epochSeconds()));
}

bool DecisionStore::pausedForJob(std::int64_t chainId, std::int64_t slurmJobId)
{
    const db::Result result = connection_.exec(selectPausedForJob, db::Params(chainId, slurmJobId));
    return result.boolean(0, result.column("paused"));
}

std::uint64_t DecisionStore::prune(int retentionDays, int batch)
{
    return connection_.exec(pruneDecisions, db::Params(retentionDays, batch)).affected();
}

} // namespace baton::service
