#include "submission_store.hpp"

namespace baton::service {

using Json = nlohmann::json;

namespace {

constexpr db::Statement insertIntent { "submission_intent",
    "INSERT INTO submissions (chain_id, seq, idempotency_key, reason) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT DO NOTHING" };
// The intents of a tick in one statement: lock the chains still in their expected state and without a
// live submission of the seq asked for (in id order, as every writer locks chains), write their intents
// (replacing a failed or cancelled one), move them to successor_pending with their resubmit request
// answered, and return their specs for sbatch. The seq asked for is the next one, or the one after it
// (a second successor) while the next one's submission is live.
constexpr db::Statement recordIntentsStatement { "submission_intents",
    "WITH r AS (SELECT * FROM jsonb_to_recordset($1::jsonb)"
    "   AS r(chain_id bigint, state text, seq int, key text, reason text)),"
    " locked AS (SELECT c.id, r.seq, r.key, r.reason FROM chains c"
    "   JOIN r ON c.id = r.chain_id AND c.state = r.state AND (c.seq + 1 = r.seq OR (c.seq + 2 = r.seq"
    "   AND EXISTS (SELECT 1 FROM submissions n WHERE n.chain_id = c.id AND n.seq = c.seq + 1"
    "   AND n.state IN ('intent', 'submitted'))))"
    "   WHERE NOT EXISTS (SELECT 1 FROM submissions s WHERE s.chain_id = c.id AND s.seq = r.seq"
    "   AND s.state NOT IN ('failed', 'cancelled')) ORDER BY c.id FOR UPDATE OF c),"
    // A failed submission keeps its key (its sbatch may have been accepted after all: the queue is
    // searched for it); a cancelled one's job is in the queue under the old key, so the new intent gets
    // a key of its own.
    " intents AS (INSERT INTO submissions (chain_id, seq, idempotency_key, reason)"
    "   SELECT id, seq, key, reason FROM locked"
    "   ON CONFLICT (chain_id, seq) DO UPDATE SET idempotency_key = CASE WHEN submissions.state = 'cancelled'"
    "   THEN EXCLUDED.idempotency_key || '.' || (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    "   ELSE EXCLUDED.idempotency_key END,"
    "   reason = EXCLUDED.reason, state = 'intent', slurm_job_id = NULL, error = NULL, created_at = now(),"
    "   submitted_at = NULL WHERE submissions.state IN ('failed', 'cancelled')"
    "   RETURNING chain_id, idempotency_key)"
    " UPDATE chains c SET state = 'successor_pending', resubmit_requested = false, updated_at = now()"
    " FROM locked JOIN intents i ON i.chain_id = locked.id WHERE c.id = locked.id"
    " RETURNING c.id, coalesce(c.spec, 'null'::jsonb) AS spec, i.idempotency_key",
    true };
constexpr db::Statement updateSubmitted { "submission_submitted",
    "UPDATE submissions SET state = 'submitted', slurm_job_id = $2, submitted_at = now(), error = NULL"
    " WHERE idempotency_key = $1",
    true };
// Data-modifying WITH clauses run to completion whether or not the main statement reads them.
constexpr db::Statement updateSubmittedMany { "submission_submitted_many",
    "WITH s AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(key text, chain bigint, job bigint,"
    " wait double precision)),"
    " marked AS (UPDATE submissions SET state = 'submitted', slurm_job_id = s.job, submitted_at = now(),"
    " error = NULL FROM s WHERE idempotency_key = s.key RETURNING 1)"
    " INSERT INTO predictions (chain_id, slurm_job_id, predicted_at, predicted_wait_s)"
    " SELECT chain, job, to_timestamp($2), wait FROM s WHERE wait IS NOT NULL",
    true };
constexpr db::Statement updateSubmission { "submission_state",
    "UPDATE submissions SET state = $3, error = $4 WHERE chain_id = $1 AND seq = $2", true };
constexpr db::Statement selectSubmission { "submission_of_seq",
    "SELECT seq, idempotency_key, reason, state, slurm_job_id, extract(epoch FROM created_at)::bigint"
    " AS created_unix, coalesce(error, '') AS error FROM submissions WHERE chain_id = $1 AND seq = $2",
    true };
constexpr db::Statement updatePrediction { "prediction_actual",
    "UPDATE predictions SET actual_wait_s = $2 WHERE slurm_job_id = $1 AND actual_wait_s IS NULL"
    " RETURNING predicted_wait_s",
    true };

} // namespace

SubmissionColumns::SubmissionColumns(const db::Result& r, std::string_view prefix)
    : at_(r.columns(names, prefix))
{ }

SubmissionRow SubmissionColumns::read(const db::Result& r, int row) const
{
    return SubmissionRow { static_cast<int>(r.int64(row, at_[Seq])), std::string(r.text(row, at_[Key])),
        std::string(r.text(row, at_[Reason])), std::string(r.text(row, at_[State])),
        r.optInt64(row, at_[SlurmJobId]), r.int64(row, at_[Created]), std::string(r.text(row, at_[Error])) };
}

bool SubmissionStore::recordIntent(std::int64_t chainId, int seq, const std::string& key, const std::string& reason)
{
    return connection_.exec(insertIntent, db::Params(chainId, seq, key, reason)).affected() == 1;
}

std::unordered_map<std::int64_t, SubmissionStore::RecordedIntent> SubmissionStore::recordIntents(
    const std::vector<IntentRequest>& requests)
{
    std::unordered_map<std::int64_t, RecordedIntent> recorded;
    if (requests.empty())
        return recorded;
    Json wanted = Json::array();
    for (const IntentRequest& r : requests)
        wanted.push_back({ { "chain_id", r.chainId }, { "state", nameOf(r.from) }, { "seq", r.seq },
            { "key", r.key }, { "reason", r.reason } });
    const db::Result result = connection_.exec(recordIntentsStatement, db::Params(wanted));
    const int id = result.column("id"), spec = result.column("spec"), key = result.column("idempotency_key");
    for (int row = 0; row < result.rows(); ++row)
        recorded.emplace(
            result.int64(row, id), RecordedIntent { result.json(row, spec), std::string(result.text(row, key)) });
    return recorded;
}

void SubmissionStore::markSubmitted(const std::string& key, std::int64_t slurmJobId)
{
    connection_.exec(updateSubmitted, db::Params(key, slurmJobId));
}

void SubmissionStore::markState(std::int64_t chainId, int seq, const std::string& state, const std::string& error)
{
    connection_.exec(updateSubmission, db::Params(chainId, seq, state, error));
}

std::optional<SubmissionRow> SubmissionStore::find(std::int64_t chainId, int seq)
{
    const db::Result result = connection_.exec(selectSubmission, db::Params(chainId, seq));
    if (result.rows() == 0)
        return std::nullopt;
    return SubmissionColumns(result).read(result, 0);
}

void SubmissionStore::recordSubmitted(const std::vector<SubmittedJob>& jobs)
{
    if (jobs.empty())
        return;
    Json rows = Json::array();
    for (const SubmittedJob& job : jobs)
        rows.push_back(Json { { "key", job.key }, { "chain", job.chainId }, { "job", job.slurmJobId },
            { "wait", job.predictedWaitSeconds ? Json(*job.predictedWaitSeconds) : Json() } });
    connection_.exec(updateSubmittedMany, db::Params(rows, db::epochSeconds()));
}

std::optional<double> SubmissionStore::resolvePrediction(std::int64_t slurmJobId, double actualWaitSeconds)
{
    const db::Result result = connection_.exec(updatePrediction, db::Params(slurmJobId, actualWaitSeconds));
    if (result.rows() == 0)
        return std::nullopt;
    return result.real(0, result.column("predicted_wait_s"));
}

} // namespace baton::service
