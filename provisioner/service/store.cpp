#include "store.hpp"

#include <baton_contract.hpp>
#include <errors.hpp>
#include <repositories.hpp>
#include <transaction.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include <xxhash.h>

namespace baton::service {

namespace {

using db::Params;
using db::Result;
using db::Statement;
using Json = nlohmann::json;

#define BATON_CHAIN_COLUMNS                                                                                  \
    "SELECT id, owner_uid, coalesce(owner_name, ''), name, state, seq, generation, retries, reason,"         \
    " coalesce(spec, 'null'::jsonb), chain_dir, resubmit_requested, extract(epoch FROM updated_at)::bigint," \
    " token FROM chains "
constexpr Statement insertChain { "svc_insert_chain",
    "INSERT INTO chains (owner_uid, owner_name, name, chain_dir, spec, state) VALUES ($1, $2, $3, $4, $5,"
    " 'running') ON CONFLICT (owner_uid, name) DO NOTHING" };
constexpr Statement selectChainById { "svc_chain_by_id", BATON_CHAIN_COLUMNS "WHERE id = $1", true };
constexpr Statement selectChainByKey { "svc_chain_by_key",
    BATON_CHAIN_COLUMNS "WHERE owner_uid = $1 AND name = $2", true };
constexpr Statement selectChains { "svc_chains",
    BATON_CHAIN_COLUMNS "WHERE ($1::bigint IS NULL OR owner_uid = $1) AND ($2::text IS NULL OR state = $2)"
                        " AND id > $3 ORDER BY id LIMIT $4",
    true };
constexpr Statement selectSpec { "svc_chain_spec",
    "SELECT coalesce(spec, 'null'::jsonb) FROM chains WHERE id = $1", true };
#undef BATON_CHAIN_COLUMNS
// Every change of a chain's state is fenced on the state and seq its writer read: a write made from a
// stale view (a pause or cancel came in between, another instance advanced the chain) changes nothing.
constexpr Statement transitionChain { "svc_transition",
    "UPDATE chains SET state = $2, reason = coalesce($4, reason), updated_at = now()"
    " WHERE id = $1 AND state = $3 AND seq = $5" };
constexpr Statement advanceChain { "svc_advance",
    "UPDATE chains SET seq = $2 + 1, state = $3, updated_at = now() WHERE id = $1 AND seq = $2 AND state = $4" };
// A chain that runs again (a resubmitted or re-created ended chain) continues after the highest seq any
// of its jobs or submissions ever had, so that its next job never takes a seq that is already used.
constexpr Statement restartChain { "svc_restart",
    "UPDATE chains c SET seq = greatest(c.seq, coalesce((SELECT max(x) + 1 FROM ("
    " SELECT restart_count AS x FROM jobs WHERE chain_id = c.id"
    " UNION ALL SELECT seq FROM submissions WHERE chain_id = c.id) used), 0)),"
    " state = 'running', retries = 0, resubmit_requested = false, reason = $4,"
    " spec = coalesce($5, spec), updated_at = now()"
    " WHERE id = $1 AND state = $2 AND seq = $3 RETURNING seq",
    true };
constexpr Statement updateRetries { "svc_retries", "UPDATE chains SET retries = $2 WHERE id = $1", true };
constexpr Statement updateGeneration { "svc_generation", "UPDATE chains SET generation = $2 WHERE id = $1",
    true };
constexpr Statement updateResubmit { "svc_resubmit",
    "UPDATE chains SET resubmit_requested = $2, updated_at = now() WHERE id = $1", true };
constexpr Statement updateChainDir { "svc_chain_dir",
    "UPDATE chains SET chain_dir = $2 WHERE id = $1 AND chain_dir IS DISTINCT FROM $2", true };
constexpr Statement updateSpec { "svc_spec", "UPDATE chains SET spec = $2 WHERE id = $1", true };

constexpr Statement insertIntent { "svc_intent",
    "INSERT INTO submissions (chain_id, seq, idempotency_key, reason) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT DO NOTHING" };
// The intents of a tick in one statement: lock the chains still in their expected state and without a
// live submission of the next seq (in id order, as every writer locks chains), write their intents
// (replacing a failed or cancelled one), move them to successor_pending with their resubmit request
// answered, and return their specs for sbatch.
constexpr Statement recordIntentsStatement { "svc_intents",
    "WITH r AS (SELECT * FROM jsonb_to_recordset($1::jsonb)"
    "   AS r(chain_id bigint, state text, seq int, key text, reason text)),"
    " locked AS (SELECT c.id, r.seq, r.key, r.reason FROM chains c"
    "   JOIN r ON c.id = r.chain_id AND c.state = r.state AND c.seq + 1 = r.seq"
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
    " RETURNING c.id, coalesce(c.spec, 'null'::jsonb), i.idempotency_key",
    true };
constexpr Statement updateSubmitted { "svc_submitted",
    "UPDATE submissions SET state = 'submitted', slurm_job_id = $2, submitted_at = now(), error = NULL"
    " WHERE idempotency_key = $1",
    true };
// Data-modifying WITH clauses run to completion whether or not the main statement reads them.
constexpr Statement updateSubmittedMany { "svc_submitted_many",
    "WITH s AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(key text, chain bigint, job bigint,"
    " wait double precision)),"
    " marked AS (UPDATE submissions SET state = 'submitted', slurm_job_id = s.job, submitted_at = now(),"
    " error = NULL FROM s WHERE idempotency_key = s.key RETURNING 1)"
    " INSERT INTO predictions (chain_id, slurm_job_id, predicted_at, predicted_wait_s)"
    " SELECT chain, job, to_timestamp($2), wait FROM s WHERE wait IS NOT NULL",
    true };
constexpr Statement updateSubmission { "svc_submission_state",
    "UPDATE submissions SET state = $3, error = $4 WHERE chain_id = $1 AND seq = $2", true };
constexpr Statement selectSubmission { "svc_submission",
    "SELECT seq, idempotency_key, reason, state, slurm_job_id, extract(epoch FROM created_at)::bigint,"
    " coalesce(error, '') FROM submissions WHERE chain_id = $1 AND seq = $2",
    true };
constexpr Statement deleteSubmission { "svc_forget_submission",
    "DELETE FROM submissions WHERE chain_id = $1 AND seq = $2 AND state IN ('failed', 'cancelled')", true };

// Job rows as slurmctld reports them, a batch at a time; a job already recorded keeps its chain and seq.
// A row that would be a second live job of its (chain, seq) is left out (and returned missing) instead of
// failing the batch for every chain.
constexpr Statement upsertJobRows { "svc_upsert_jobs",
    "INSERT INTO jobs (chain_id, slurm_job_id, restart_count, name, submit_time, start_time, end_time,"
    " time_limit_s, nodes, state, exit_code, owner_uid, withdrawn)"
    " SELECT chain, job, seq, name, to_timestamp(submitted), to_timestamp(started), to_timestamp(ended),"
    " time_limit_s, nodes, state, exit_code, owner_uid, withdrawn FROM jsonb_to_recordset($1::jsonb)"
    " AS w(chain bigint, job bigint, seq int, name text, submitted bigint, started bigint, ended bigint,"
    " time_limit_s bigint, nodes int, state text, exit_code int, owner_uid bigint, withdrawn boolean)"
    " WHERE w.withdrawn OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.chain_id = w.chain"
    " AND j.restart_count = w.seq AND j.slurm_job_id <> w.job AND NOT j.withdrawn)"
    " ON CONFLICT (slurm_job_id) DO UPDATE SET submit_time = EXCLUDED.submit_time,"
    " start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time, time_limit_s = EXCLUDED.time_limit_s,"
    " nodes = EXCLUDED.nodes, state = EXCLUDED.state, exit_code = EXCLUDED.exit_code,"
    " withdrawn = EXCLUDED.withdrawn RETURNING slurm_job_id",
    true };
#define BATON_JOB_COLUMNS                                                                                    \
    "SELECT restart_count, slurm_job_id, state, extract(epoch FROM submit_time)::bigint,"                    \
    " extract(epoch FROM start_time)::bigint, extract(epoch FROM end_time)::bigint, time_limit_s, "          \
    "exit_code, withdrawn,"                                                                                  \
    " chain_id FROM jobs "
constexpr Statement selectJobs { "svc_jobs", BATON_JOB_COLUMNS "WHERE chain_id = $1 ORDER BY restart_count",
    true };
constexpr Statement selectJobBySlurmId { "svc_job_by_slurm_id", BATON_JOB_COLUMNS "WHERE slurm_job_id = $1",
    true };
#undef BATON_JOB_COLUMNS

constexpr Statement insertEventRow { "svc_insert_event",
    "INSERT INTO events (idempotency_key, kind, chain_name, slurm_job_id, payload, sender_uid)"
    " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (idempotency_key) DO NOTHING" };
constexpr Statement selectUnprocessed { "svc_unprocessed_events",
    "SELECT id, kind, chain_name, slurm_job_id, payload FROM events WHERE processed_at IS NULL"
    " ORDER BY id LIMIT $1",
    true };

// The plugin's step reports for one job (index events_job_idx), for checkpointSignalScope.
constexpr Statement selectStepEvents { "svc_step_events",
    "SELECT kind, payload->>'step', payload->>'requeue_count' FROM events"
    " WHERE slurm_job_id = $1 AND kind IN ('step_start', 'task_exit')",
    true };

constexpr Statement updateProcessedMany { "svc_processed_many",
    "UPDATE events SET processed_at = now() WHERE id = ANY($1::bigint[])", true };
constexpr Statement insertDecisions { "svc_decisions_many",
    "INSERT INTO decisions (chain_id, decided_at, policy, action, inputs, outcome)"
    " SELECT (d->>0)::bigint, to_timestamp($3), $2, d->>1, d->2, d->>3 FROM jsonb_array_elements($1::jsonb) "
    "d",
    true };

constexpr Statement insertCheckpointHint { "svc_checkpoint",
    "INSERT INTO checkpoints (chain_id, slurm_job_id, iteration, path, total_bytes, created_at, manifest,"
    " training_done, final) VALUES ($1, $2, $3, $4, $5, to_timestamp($6), $7, $8, $9)"
    " ON CONFLICT (chain_id, iteration) DO UPDATE SET training_done = checkpoints.training_done OR"
    " EXCLUDED.training_done, final = checkpoints.final OR EXCLUDED.final",
    true };
constexpr Statement selectLatestCheckpoint { "svc_latest_checkpoint",
    "SELECT iteration, path, extract(epoch FROM created_at), training_done, final, slurm_job_id"
    " FROM checkpoints WHERE chain_id = $1 ORDER BY iteration DESC LIMIT 1",
    true };
constexpr Statement selectTrainingDone { "svc_training_done",
    "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE chain_id = $1 AND training_done)", true };
constexpr Statement selectPausedForJob { "svc_paused_for_job",
    "SELECT EXISTS (SELECT 1 FROM decisions WHERE chain_id = $1 AND action = 'pause'"
    " AND inputs @> jsonb_build_object('job_id', $2::bigint))",
    true };
constexpr Statement selectCheckpoints { "svc_checkpoints",
    "SELECT iteration, path, extract(epoch FROM created_at), total_bytes, training_done, final, slurm_job_id"
    " FROM checkpoints WHERE chain_id = $1 ORDER BY iteration DESC LIMIT 50",
    true };

constexpr Statement selectDecisions { "svc_decisions",
    "SELECT extract(epoch FROM decided_at), policy, action, inputs, outcome FROM decisions WHERE chain_id = "
    "$1"
    " ORDER BY id DESC LIMIT 50",
    true };

constexpr Statement updatePrediction { "svc_prediction_actual",
    "UPDATE predictions SET actual_wait_s = $2 WHERE slurm_job_id = $1 AND actual_wait_s IS NULL"
    " RETURNING predicted_wait_s",
    true };
constexpr Statement insertHandover { "svc_handover",
    "INSERT INTO handovers (chain_id, generation, predecessor_job_id, successor_job_id, signalled_at)"
    " VALUES ($1, $2, $3, $4, to_timestamp($5)) ON CONFLICT DO NOTHING",
    true };
constexpr Statement finishHandover { "svc_handover_done",
    "UPDATE handovers SET completed_at = to_timestamp($3),"
    " handover_s = greatest(0, $3 - extract(epoch FROM signalled_at))"
    " WHERE chain_id = $1 AND generation = $2 AND completed_at IS NULL RETURNING handover_s",
    true };
constexpr Statement selectHandoverSignal { "svc_handover_signal",
    "SELECT extract(epoch FROM signalled_at)::bigint FROM handovers WHERE chain_id = $1 AND generation = $2",
    true };
constexpr Statement selectHandoverSent { "svc_handover_sent",
    "SELECT extract(epoch FROM signal_sent_at)::bigint, signal_attempts FROM handovers"
    " WHERE chain_id = $1 AND generation = $2",
    true };
constexpr Statement updateHandoverSent { "svc_handover_sent_update",
    "UPDATE handovers SET signal_sent_at = to_timestamp($3), signal_attempts = signal_attempts + 1"
    " WHERE chain_id = $1 AND generation = $2",
    true };
// The cancelled chains that may still have jobs, with the jobs and keys of their current and next seq.
constexpr Statement selectChainsToWithdraw { "svc_chains_to_withdraw",
    "SELECT c.id, c.owner_uid, coalesce(c.owner_name, ''), c.name, c.state, c.seq, c.generation, c.retries,"
    " c.reason, 'null'::jsonb, c.chain_dir, c.resubmit_requested, extract(epoch FROM c.updated_at)::bigint,"
    " c.token, coalesce((SELECT array_agg(DISTINCT x) FROM (SELECT slurm_job_id AS x FROM jobs"
    " WHERE chain_id = c.id AND restart_count IN (c.seq, c.seq + 1) UNION ALL SELECT slurm_job_id"
    " FROM submissions WHERE chain_id = c.id AND seq IN (c.seq, c.seq + 1) AND slurm_job_id IS NOT NULL) j),"
    " '{}')::text, coalesce((SELECT array_agg(idempotency_key) FROM submissions"
    " WHERE chain_id = c.id AND seq IN (c.seq, c.seq + 1)), '{}')::text"
    " FROM chains c WHERE c.withdraw_jobs ORDER BY c.id",
    true };
constexpr Statement updateWithdrawJobs { "svc_withdraw_jobs",
    "UPDATE chains SET withdraw_jobs = $2 WHERE id = $1 AND withdraw_jobs IS DISTINCT FROM $2", true };
constexpr Statement deleteUnstarted { "svc_delete_unstarted",
    "DELETE FROM chains c WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM jobs WHERE chain_id = c.id)"
    " AND NOT EXISTS (SELECT 1 FROM submissions WHERE chain_id = c.id AND slurm_job_id IS NOT NULL)",
    true };
constexpr Statement updateDeadLetter { "svc_dead_letter",
    "UPDATE events SET processed_at = now(), error = $2 WHERE id = $1", true };
constexpr Statement selectHandovers { "svc_handovers",
    "SELECT generation, predecessor_job_id, successor_job_id, extract(epoch FROM signalled_at),"
    " extract(epoch FROM completed_at), handover_s FROM handovers WHERE chain_id = $1 ORDER BY generation",
    true };

// The tick's read starts from the live chains (their partial index) and probes each one's rows by its key:
// a year of ended chains, jobs and checkpoints must not be scanned every tick. The LIMIT in each probe
// changes no result (a chain has one row per seq) but keeps the planner from flattening the probes into
// a join that it may hash over the whole table.
// Everything a tick reads of the live chains, in one statement (one snapshot, one round trip): each
// chain with its jobs and submissions of seq and seq + 1, whether its training is done, and when its
// newest checkpoint was written.
// clang-format off
#define BATON_TICK_JOB(j)                                                                                    \
    " " j ".restart_count, " j ".slurm_job_id, " j ".state, extract(epoch FROM " j ".submit_time)::bigint,"  \
    " extract(epoch FROM " j ".start_time)::bigint, extract(epoch FROM " j ".end_time)::bigint,"            \
    " " j ".time_limit_s, " j ".exit_code, " j ".withdrawn,"
#define BATON_TICK_SUBMISSION(s)                                                                             \
    " " s ".seq, " s ".idempotency_key, " s ".reason, " s ".state, " s ".slurm_job_id,"                      \
    " extract(epoch FROM " s ".created_at)::bigint, coalesce(" s ".error, ''),"
// The jobs, submissions, end of training and newest checkpoint are looked up only for the chains whose
// revision or seq differs from the ones the caller read them at ($1: chain ids, $2: their revisions,
// $3: their seqs; a new seq alone changes which rows are the current and next job's).
constexpr Statement selectTickChains { "svc_tick_chains",
    "WITH live AS MATERIALIZED (SELECT id, owner_uid, owner_name, name, state, seq, generation, retries,"
    " reason, chain_dir, resubmit_requested, updated_at, token, revision FROM chains"
    " WHERE state NOT IN ('finished', 'failed', 'cancelled')),"
    " known AS (SELECT unnest($1::bigint[]) AS id, unnest($2::bigint[]) AS revision,"
    " unnest($3::int[]) AS seq),"
    " c AS (SELECT live.*, (known.revision, known.seq) IS DISTINCT FROM (live.revision, live.seq) AS stale"
    " FROM live LEFT JOIN known USING (id))"
    " SELECT c.id, c.owner_uid, coalesce(c.owner_name, ''), c.name, c.state, c.seq, c.generation, c.retries,"
    " c.reason, 'null'::jsonb, c.chain_dir, c.resubmit_requested, extract(epoch FROM c.updated_at)::bigint,"
    " c.token, c.revision, c.stale,"
    BATON_TICK_JOB("j0") BATON_TICK_JOB("j1") BATON_TICK_SUBMISSION("s0") BATON_TICK_SUBMISSION("s1")
    " k.done IS NOT NULL, extract(epoch FROM n.created_at) FROM c"
    " LEFT JOIN LATERAL (SELECT * FROM jobs"
    " WHERE c.stale AND chain_id = c.id AND restart_count = c.seq ORDER BY withdrawn, id DESC LIMIT 1) j0 ON true"
    " LEFT JOIN LATERAL (SELECT * FROM jobs"
    " WHERE c.stale AND chain_id = c.id AND restart_count = c.seq + 1 ORDER BY withdrawn, id DESC LIMIT 1) j1"
    " ON true"
    " LEFT JOIN LATERAL (SELECT * FROM submissions"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq LIMIT 1) s0 ON true"
    " LEFT JOIN LATERAL (SELECT * FROM submissions"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq + 1 LIMIT 1) s1 ON true"
    " LEFT JOIN LATERAL (SELECT true AS done FROM checkpoints"
    " WHERE c.stale AND chain_id = c.id AND training_done LIMIT 1) k ON true"
    " LEFT JOIN LATERAL (SELECT created_at FROM checkpoints"
    " WHERE c.stale AND chain_id = c.id ORDER BY iteration DESC LIMIT 1) n ON true"
    " ORDER BY c.id",
    true };
#undef BATON_TICK_JOB
#undef BATON_TICK_SUBMISSION
// clang-format on
constexpr int tickJobColumns = 9, tickSubmissionColumns = 7;

// With the highest chain id given so far, in the same statement: one row even without live chains.
constexpr Statement selectLiveStates { "svc_live_states",
    "SELECT top.max_id, c.id, c.state FROM (SELECT coalesce(max(id), 0) AS max_id FROM chains) top"
    " LEFT JOIN (SELECT id, state FROM chains WHERE state NOT IN ('finished', 'failed', 'cancelled')) c"
    " ON true ORDER BY c.id",
    true };
// Retention: the oldest processed events and decisions past the period, a batch at a time (the time
// indexes find them), by the database's clock.
constexpr Statement pruneEvents { "svc_prune_events",
    "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE processed_at IS NOT NULL"
    " AND received_at < now() - make_interval(days => $1) ORDER BY received_at LIMIT $2)" };
constexpr Statement pruneDecisions { "svc_prune_decisions",
    "DELETE FROM decisions WHERE id IN (SELECT id FROM decisions"
    " WHERE decided_at < now() - make_interval(days => $1) ORDER BY decided_at LIMIT $2)" };
// A credential lives at most munged's TTL (5 min by default): an hour covers every configured one.
constexpr Statement pruneCredentials { "svc_prune_credentials",
    "DELETE FROM credentials_used WHERE digest IN (SELECT digest FROM credentials_used"
    " WHERE used_at < now() - interval '1 hour' ORDER BY used_at LIMIT $1)" };
constexpr Statement insertCredentialUse { "svc_credential_use",
    "INSERT INTO credentials_used (digest) VALUES (decode($1, 'hex')) ON CONFLICT DO NOTHING" };
constexpr Statement selectEndedCounts { "svc_ended_counts",
    "SELECT state, count(*) FROM chains WHERE state IN ('finished', 'failed', 'cancelled') GROUP BY state",
    true };

ChainRow chainAt(const Result& r, int row)
{
    ChainRow chain;
    chain.id = r.int64(row, 0);
    chain.ownerUid = r.int64(row, 1);
    chain.ownerName = std::string(r.text(row, 2));
    chain.name = std::string(r.text(row, 3));
    chain.state = chainStateFromName(r.text(row, 4)).value_or(ChainState::Failed);
    chain.seq = static_cast<int>(r.int64(row, 5));
    chain.generation = static_cast<int>(r.int64(row, 6));
    chain.retries = static_cast<int>(r.int64(row, 7));
    chain.reason = r.optText(row, 8);
    chain.spec = r.json(row, 9);
    chain.chainDir = r.optText(row, 10);
    chain.resubmitRequested = r.boolean(row, 11);
    chain.updatedAt = r.int64(row, 12);
    chain.token = std::string(r.text(row, 13));
    return chain;
}

// A job's columns from column `at` on.
JobRow jobFrom(const Result& r, int row, int at)
{
    JobRow job;
    job.seq = static_cast<int>(r.int64(row, at));
    job.slurmJobId = r.int64(row, at + 1);
    job.state = std::string(r.text(row, at + 2));
    job.submitTime = r.optInt64(row, at + 3);
    job.startTime = r.optInt64(row, at + 4);
    job.endTime = r.optInt64(row, at + 5);
    job.timeLimitSeconds = r.optInt64(row, at + 6);
    if (auto code = r.optInt64(row, at + 7))
        job.exitCode = static_cast<int>(*code);
    job.withdrawn = r.boolean(row, at + 8);
    return job;
}

JobRow jobAt(const Result& r, int row)
{
    return jobFrom(r, row, 0);
}

// A submission's columns from column `at` on.
SubmissionRow submissionFrom(const Result& r, int row, int at)
{
    return SubmissionRow { static_cast<int>(r.int64(row, at)), std::string(r.text(row, at + 1)),
        std::string(r.text(row, at + 2)), std::string(r.text(row, at + 3)), r.optInt64(row, at + 4),
        r.int64(row, at + 5), std::string(r.text(row, at + 6)) };
}

SubmissionRow submissionAt(const Result& r, int row)
{
    return submissionFrom(r, row, 0);
}

std::optional<std::int64_t> positive(std::int64_t value)
{
    return value > 0 ? std::optional<std::int64_t>(value) : std::nullopt;
}

// A PostgreSQL array literal of ids, for `= ANY($1::bigint[])`.
std::string bigintArray(const std::vector<std::int64_t>& ids)
{
    std::string text = "{";
    for (const std::int64_t id : ids)
        text += (text.size() > 1 ? "," : "") + std::to_string(id);
    return text + "}";
}

std::int64_t epochSeconds()
{
    return std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::system_clock::now().time_since_epoch())
        .count();
}

Json optionalJson(const std::optional<std::int64_t>& value)
{
    return value ? Json(*value) : Json();
}

} // namespace

Json ChainRow::toJson() const
{
    return Json {
        { "id", id },
        { "owner", ownerName },
        { "owner_uid", ownerUid },
        { "name", name },
        { "state", nameOf(state) },
        { "seq", seq },
        { "generation", generation },
        { "retries", retries },
        { "reason", reason ? Json(*reason) : Json() },
        { "chain_dir", chainDir ? Json(*chainDir) : Json() },
        { "updated_unix", updatedAt },
    };
}

ChainRow Store::createChain(std::int64_t ownerUid, const std::string& ownerName, const std::string& name,
    const std::optional<std::string>& chainDir, const Json& spec)
{
    connection_.exec(insertChain, Params(ownerUid, ownerName, name, chainDir, spec));
    auto created = chain(ownerUid, name);
    if (!created)
        throw db::DbError("chain " + name + " vanished right after it was created");
    return *created;
}

std::optional<ChainRow> Store::chain(std::int64_t id)
{
    return connection_.exec(selectChainById, Params(id)).first(chainAt);
}

std::optional<ChainRow> Store::chain(std::int64_t ownerUid, const std::string& name)
{
    return connection_.exec(selectChainByKey, Params(ownerUid, name)).first(chainAt);
}

std::vector<ChainRow> Store::chains(std::optional<std::int64_t> ownerUid, std::optional<ChainState> state,
    std::int64_t afterId, std::int64_t limit)
{
    std::optional<std::string> stateName;
    if (state)
        stateName = std::string(nameOf(*state));
    return connection_.exec(selectChains, Params(ownerUid, stateName, afterId, limit)).all(chainAt);
}

std::vector<LiveChain> Store::liveChainsForTick(LiveChainCache& cache)
{
    // The cached chains, as the statement's arrays of ids, revisions and seqs.
    const auto known = [&] {
        std::string ids = "{", revisions = "{", seqs = "{";
        for (const auto& [id, entry] : cache.chains) {
            if (ids.size() > 1) {
                ids += ',';
                revisions += ',';
                seqs += ',';
            }
            ids += std::to_string(id);
            revisions += std::to_string(entry.revision);
            seqs += std::to_string(entry.seq);
        }
        return Params(ids + "}", revisions + "}", seqs + "}");
    };
    std::optional<Result> read;
    // A reconnect, before the statement or within it, makes the whole cache unusable.
    while (!read || cache.session != connection_.session()) {
        if (cache.session != connection_.session()) {
            cache.chains.clear();
            cache.session = connection_.session();
        }
        read.emplace(connection_.exec(selectTickChains, known()));
    }
    const Result& result = *read;
    constexpr int revisionAt = 14, staleAt = 15, jobsAt = 16, submissionsAt = jobsAt + 2 * tickJobColumns,
                  doneAt = submissionsAt + 2 * tickSubmissionColumns, newestCheckpointAt = doneAt + 1;
    std::vector<LiveChain> live;
    live.reserve(static_cast<std::size_t>(result.rows()));
    std::unordered_map<std::int64_t, LiveChainCache::Entry> kept;
    kept.reserve(static_cast<std::size_t>(result.rows()));
    cache.readAgain = 0;
    for (int row = 0; row < result.rows(); ++row) {
        ChainRow chain = chainAt(result, row);
        LiveChainCache::Entry entry;
        if (!result.boolean(row, staleAt)) { // the statement found it in the cache, as it is now
            entry = std::move(cache.chains.at(chain.id));
        } else {
            entry.revision = result.int64(row, revisionAt);
            entry.seq = chain.seq;
            entry.rows.trainingDone = result.boolean(row, doneAt);
            if (!result.isNull(row, newestCheckpointAt))
                entry.rows.newestCheckpointAt = result.real(row, newestCheckpointAt);
            for (int at : { jobsAt, jobsAt + tickJobColumns })
                if (!result.isNull(row, at))
                    entry.rows.jobs.push_back(jobFrom(result, row, at));
            if (!result.isNull(row, submissionsAt))
                entry.rows.current = submissionFrom(result, row, submissionsAt);
            if (!result.isNull(row, submissionsAt + tickSubmissionColumns))
                entry.rows.next = submissionFrom(result, row, submissionsAt + tickSubmissionColumns);
            ++cache.readAgain;
        }
        const std::int64_t id = chain.id;
        live.push_back(entry.rows);
        live.back().chain = std::move(chain);
        kept.emplace(id, std::move(entry));
    }
    cache.chains = std::move(kept); // chains that ended are dropped
    return live;
}

Json Store::spec(std::int64_t chainId)
{
    return connection_.exec(selectSpec, Params(chainId))
        .first([](const Result& r, int row) { return r.json(row, 0); })
        .value_or(Json());
}

bool Store::transition(const ChainRow& chain, ChainEvent event, const std::optional<std::string>& reason)
{
    const auto to = nextState(chain.state, event);
    if (!to)
        return false;
    return connection_
               .exec(transitionChain, Params(chain.id, nameOf(*to), nameOf(chain.state), reason, chain.seq))
               .affected()
        == 1;
}

bool Store::advance(const ChainRow& chain, ChainEvent event)
{
    const auto to = nextState(chain.state, event);
    if (!to)
        return false;
    return connection_.exec(advanceChain, Params(chain.id, chain.seq, nameOf(*to), nameOf(chain.state)))
               .affected()
        == 1;
}

std::optional<int> Store::restart(const ChainRow& chain, ChainEvent event, const std::string& reason,
    const std::optional<nlohmann::json>& spec)
{
    if (!isTerminal(chain.state) || nextState(chain.state, event) != ChainState::Running)
        return std::nullopt;
    return connection_.exec(restartChain, Params(chain.id, nameOf(chain.state), chain.seq, reason, spec))
        .first([](const Result& r, int row) { return static_cast<int>(r.int64(row, 0)); });
}

void Store::setRetries(std::int64_t chainId, int retries)
{
    connection_.exec(updateRetries, Params(chainId, retries));
}

void Store::setGeneration(std::int64_t chainId, int generation)
{
    connection_.exec(updateGeneration, Params(chainId, generation));
}

void Store::setResubmitRequested(std::int64_t chainId, bool requested)
{
    connection_.exec(updateResubmit, Params(chainId, requested));
}

void Store::setChainDir(std::int64_t chainId, const std::string& dir)
{
    connection_.exec(updateChainDir, Params(chainId, dir));
}

void Store::setSpec(std::int64_t chainId, const Json& spec)
{
    connection_.exec(updateSpec, Params(chainId, spec));
}

bool Store::recordIntent(std::int64_t chainId, int seq, const std::string& key, const std::string& reason)
{
    return connection_.exec(insertIntent, Params(chainId, seq, key, reason)).affected() == 1;
}

std::unordered_map<std::int64_t, Store::RecordedIntent> Store::recordIntents(
    const std::vector<IntentRequest>& requests)
{
    std::unordered_map<std::int64_t, RecordedIntent> recorded;
    if (requests.empty())
        return recorded;
    Json wanted = Json::array();
    for (const IntentRequest& r : requests)
        wanted.push_back({ { "chain_id", r.chainId }, { "state", nameOf(r.from) }, { "seq", r.seq },
            { "key", r.key }, { "reason", r.reason } });
    const Result result = connection_.exec(recordIntentsStatement, Params(wanted));
    for (int row = 0; row < result.rows(); ++row)
        recorded.emplace(result.int64(row, 0), RecordedIntent { result.json(row, 1), std::string(result.text(row, 2)) });
    return recorded;
}

void Store::markSubmitted(const std::string& key, std::int64_t slurmJobId)
{
    connection_.exec(updateSubmitted, Params(key, slurmJobId));
}

void Store::markSubmission(std::int64_t chainId, int seq, const std::string& state, const std::string& error)
{
    connection_.exec(updateSubmission, Params(chainId, seq, state, error));
}

std::optional<SubmissionRow> Store::submission(std::int64_t chainId, int seq)
{
    return connection_.exec(selectSubmission, Params(chainId, seq)).first(submissionAt);
}

void Store::forgetSubmission(std::int64_t chainId, int seq)
{
    connection_.exec(deleteSubmission, Params(chainId, seq));
}

void Store::upsertJob(std::int64_t chainId, int seq, const ClusterJob& job)
{
    const JobWrite write { chainId, seq, job };
    upsertJobs(std::span(&write, 1));
}

std::vector<Store::RejectedJob> Store::upsertJobs(std::span<const JobWrite> writes)
{
    // One row per job: a statement may not update a row twice. A job written twice keeps the first
    // write's chain and seq (as two statements would: the second only updates) and the last one's facts.
    std::vector<JobWrite> rows;
    std::unordered_map<std::int64_t, std::size_t> rowOfJob;
    for (const JobWrite& write : writes) {
        if (const auto [at, added] = rowOfJob.emplace(write.job.id, rows.size()); !added) {
            rows[at->second].job = write.job;
            continue;
        }
        rows.push_back(write);
    }
    const auto rowOf = [](const JobWrite& write) {
        const ClusterJob& job = write.job;
        // slurmctld's clock may put an end before a start (a job cancelled at its start): the row's
        // check allows no such thing, so the end is taken as the start.
        const auto started = positive(job.startTime);
        auto ended = positive(job.endTime);
        if (started && ended && *ended < *started)
            ended = started;
        return Json { { "chain", write.chainId }, { "job", job.id }, { "seq", write.seq },
            { "name", job.name }, { "submitted", optionalJson(positive(job.submitTime)) },
            { "started", optionalJson(started) }, { "ended", optionalJson(ended) },
            { "time_limit_s", optionalJson(positive(job.timeLimitSeconds)) },
            { "nodes", job.nodes > 0 ? job.nodes : 1 }, { "state", job.state },
            { "exit_code", job.exitCode ? Json(*job.exitCode) : Json() },
            { "owner_uid", job.userId >= 0 ? Json(job.userId) : Json() }, { "withdrawn", job.withdrawn() } };
    };
    std::vector<RejectedJob> rejected;
    const auto write = [&](std::span<const JobWrite> part) {
        Json batch = Json::array();
        for (const JobWrite& w : part)
            batch.push_back(rowOf(w));
        const Result result = connection_.exec(upsertJobRows, Params(batch));
        std::unordered_set<std::int64_t> written;
        for (int row = 0; row < result.rows(); ++row)
            written.insert(result.int64(row, 0));
        for (const JobWrite& w : part)
            if (!written.contains(w.job.id))
                rejected.push_back(RejectedJob { w.chainId, w.job.id,
                    "job " + std::to_string(w.job.id) + " would be a second job of seq " + std::to_string(w.seq) });
    };
    if (rows.empty())
        return rejected;
    try {
        write(rows);
    } catch (const db::DbError& error) {
        if (!isChainDataError(error))
            throw;
        // One chain's row is refused: write them one by one, so that only that chain is held up.
        for (const JobWrite& one : rows) {
            try {
                write(std::span(&one, 1));
            } catch (const db::DbError& oneError) {
                if (!isChainDataError(oneError))
                    throw;
                rejected.push_back(RejectedJob { one.chainId, one.job.id, oneError.what() });
            }
        }
    }
    return rejected;
}

std::vector<JobRow> Store::jobs(std::int64_t chainId)
{
    return connection_.exec(selectJobs, Params(chainId)).all(jobAt);
}

std::optional<JobRow> Store::jobBySlurmId(std::int64_t slurmJobId, std::int64_t* chainId)
{
    const Result result = connection_.exec(selectJobBySlurmId, Params(slurmJobId));
    if (result.rows() == 0)
        return std::nullopt;
    if (chainId)
        *chainId = result.int64(0, 9);
    return jobAt(result, 0);
}

bool Store::insertEvent(const std::string& key, const std::string& kind,
    const std::optional<std::string>& chain, std::optional<std::int64_t> jobId, const Json& payload,
    std::int64_t senderUid)
{
    return connection_.exec(insertEventRow, Params(key, kind, chain, jobId, payload, senderUid)).affected()
        == 1;
}

SignalScope Store::checkpointSignalScope(std::int64_t slurmJobId)
{
    struct StepReport {
        bool exit;
        std::string step;
        std::int64_t requeue;
    };
    // Payloads are hints (spooled ones are user-written): a requeue count that is not a number is 0.
    const auto reports
        = connection_.exec(selectStepEvents, Params(slurmJobId)).all([](const Result& r, int row) {
              std::int64_t requeue = 0;
              if (const auto text = r.optText(row, 2))
                  std::from_chars(text->data(), text->data() + text->size(), requeue);
              return StepReport { r.text(row, 0) == "task_exit", r.optText(row, 1).value_or(""), requeue };
          });
    // Only the job's latest run counts: a requeued job's earlier steps ended with that run.
    std::int64_t latest = 0;
    for (const auto& report : reports)
        latest = std::max(latest, report.requeue);
    const auto isSrunStep = [](const std::string& step) {
        return !step.empty()
            && std::all_of(step.begin(), step.end(), [](unsigned char c) { return std::isdigit(c); });
    };
    for (const auto& started : reports) {
        if (started.exit || started.requeue != latest || !isSrunStep(started.step))
            continue;
        const bool exited = std::any_of(reports.begin(), reports.end(), [&](const StepReport& report) {
            return report.exit && report.requeue == latest && report.step == started.step;
        });
        if (!exited)
            return SignalScope::Steps;
    }
    return SignalScope::Full;
}

std::vector<EventRow> Store::unprocessedEvents(int limit)
{
    return connection_.exec(selectUnprocessed, Params(limit)).all([](const Result& r, int row) {
        return EventRow { r.int64(row, 0), std::string(r.text(row, 1)), r.optText(row, 2), r.optInt64(row, 3),
            r.json(row, 4) };
    });
}

void Store::markProcessed(const std::vector<std::int64_t>& eventIds)
{
    if (eventIds.empty())
        return;
    connection_.exec(updateProcessedMany, Params(bigintArray(eventIds)));
}

void Store::recordCheckpoint(
    std::int64_t chainId, std::optional<std::int64_t> jobId, const Json& summary, const std::string& chainDir)
{
    const auto number = [&](const char* key) -> std::optional<double> {
        const auto found = summary.find(key);
        return found != summary.end() && found->is_number() ? std::optional<double>(found->get<double>())
                                                            : std::nullopt;
    };
    const auto flag = [&](const char* key) {
        const auto found = summary.find(key);
        return found != summary.end() && found->is_boolean() && found->get<bool>();
    };
    // Each number was range-checked by the plugin that read it from the owner's manifest, and is again
    // here: an event is a hint from a user-writable file, and no value may overflow a conversion.
    const auto iteration = number("iteration");
    const auto bytes = number("total_bytes").value_or(0);
    const auto created = number("created_unix").value_or(0);
    const auto name = summary.find("name");
    if (!iteration || !contract::reportedIterationInRange(*iteration) || !contract::reportedBytesInRange(bytes)
        || !contract::reportedCreatedInRange(created) || name == summary.end() || !name->is_string()
        || !contract::parseCheckpointDirName(name->get_ref<const std::string&>()))
        throw std::invalid_argument("the checkpoint report's iteration, total_bytes, created_unix or name"
                                    " is missing or out of range");
    connection_.exec(insertCheckpointHint,
        Params(chainId, jobId, static_cast<std::int64_t>(*iteration), chainDir + "/" + name->get<std::string>(),
            static_cast<std::int64_t>(bytes), created, summary, flag("training_done"), flag("final")));
}

std::optional<Json> Store::latestCheckpoint(std::int64_t chainId)
{
    return connection_.exec(selectLatestCheckpoint, Params(chainId)).first([](const Result& r, int row) {
        return Json { { "iteration", r.int64(row, 0) }, { "path", r.text(row, 1) },
            { "created_unix", r.real(row, 2) }, { "training_done", r.boolean(row, 3) },
            { "final", r.boolean(row, 4) }, { "job_id", optionalJson(r.optInt64(row, 5)) } };
    });
}

bool Store::trainingDone(std::int64_t chainId)
{
    return connection_.exec(selectTrainingDone, Params(chainId)).boolean(0, 0);
}

bool Store::pausedForJob(std::int64_t chainId, std::int64_t slurmJobId)
{
    return connection_.exec(selectPausedForJob, Params(chainId, slurmJobId)).boolean(0, 0);
}

void Store::recordDecision(std::int64_t chainId, const std::string& policy, const std::string& action,
    const Json& inputs, const std::string& outcome)
{
    db::DecisionRepository(connection_)
        .insert(db::Decision {
            0, chainId, epochSeconds(), policy, action, inputs, std::optional<std::string>(outcome) });
}

void Store::recordDecisions(const std::string& policy, const std::vector<DecisionInput>& decisions)
{
    if (decisions.empty())
        return;
    Json rows = Json::array();
    for (const DecisionInput& d : decisions)
        rows.push_back(Json::array({ d.chainId, d.action, d.inputs, d.outcome }));
    connection_.exec(insertDecisions, Params(rows, policy, epochSeconds()));
}

void Store::recordSubmitted(const std::vector<SubmittedJob>& jobs)
{
    if (jobs.empty())
        return;
    Json rows = Json::array();
    for (const SubmittedJob& job : jobs)
        rows.push_back(Json { { "key", job.key }, { "chain", job.chainId }, { "job", job.slurmJobId },
            { "wait", job.predictedWaitSeconds ? Json(*job.predictedWaitSeconds) : Json() } });
    connection_.exec(updateSubmittedMany, Params(rows, epochSeconds()));
}

std::optional<double> Store::resolvePrediction(std::int64_t slurmJobId, double actualWaitSeconds)
{
    const Result result = connection_.exec(updatePrediction, Params(slurmJobId, actualWaitSeconds));
    if (result.rows() == 0)
        return std::nullopt;
    return result.real(0, 0);
}

void Store::startHandover(std::int64_t chainId, int generation, std::int64_t predecessor,
    std::int64_t successor, std::int64_t signalledAt)
{
    connection_.exec(insertHandover, Params(chainId, generation, predecessor, successor, signalledAt));
}

std::optional<double> Store::completeHandover(std::int64_t chainId, int generation, std::int64_t endTime)
{
    const Result result = connection_.exec(finishHandover, Params(chainId, generation, endTime));
    if (result.rows() == 0)
        return std::nullopt;
    return result.optReal(0, 0);
}

std::optional<std::int64_t> Store::handoverSignalledAt(std::int64_t chainId, int generation)
{
    const Result result = connection_.exec(selectHandoverSignal, Params(chainId, generation));
    if (result.rows() == 0)
        return std::nullopt;
    return result.int64(0, 0);
}

Store::HandoverSignal Store::handoverSignal(std::int64_t chainId, int generation)
{
    return connection_.exec(selectHandoverSent, Params(chainId, generation))
        .first([](const Result& r, int row) {
            return HandoverSignal { r.optInt64(row, 0), static_cast<int>(r.int64(row, 1)) };
        })
        .value_or(HandoverSignal {});
}

void Store::recordHandoverSignal(std::int64_t chainId, int generation, std::int64_t sentAt)
{
    connection_.exec(updateHandoverSent, Params(chainId, generation, sentAt));
}

namespace {
// The elements of a one-dimensional PostgreSQL array's text form ({a,b}); keys and ids have no quotes,
// commas or braces.
std::vector<std::string> arrayElements(std::string_view text)
{
    std::vector<std::string> items;
    if (text.size() < 2)
        return items;
    text = text.substr(1, text.size() - 2);
    while (!text.empty()) {
        const auto comma = text.find(',');
        items.emplace_back(text.substr(0, comma));
        if (comma == std::string_view::npos)
            break;
        text.remove_prefix(comma + 1);
    }
    return items;
}
} // namespace

std::vector<Store::ChainToWithdraw> Store::chainsToWithdraw()
{
    return connection_.exec(selectChainsToWithdraw).all([](const Result& r, int row) {
        ChainToWithdraw withdraw { chainAt(r, row), {}, arrayElements(r.text(row, 15)) };
        for (const std::string& id : arrayElements(r.text(row, 14)))
            withdraw.jobIds.push_back(std::stoll(id));
        return withdraw;
    });
}

void Store::setWithdrawJobs(std::int64_t chainId, bool withdraw)
{
    connection_.exec(updateWithdrawJobs, Params(chainId, withdraw));
}

bool Store::deleteUnstartedChain(std::int64_t chainId)
{
    return connection_.exec(deleteUnstarted, Params(chainId)).affected() == 1;
}

void Store::deadLetter(std::int64_t eventId, const std::string& error)
{
    connection_.exec(updateDeadLetter, Params(eventId, error));
}

Store::LiveStates Store::liveStates()
{
    const Result result = connection_.exec(selectLiveStates);
    LiveStates states;
    states.chains.reserve(static_cast<std::size_t>(result.rows()));
    for (int row = 0; row < result.rows(); ++row) {
        states.maxChainId = result.int64(row, 0);
        if (!result.isNull(row, 1))
            states.chains.emplace_back(
                result.int64(row, 1), chainStateFromName(result.text(row, 2)).value_or(ChainState::Failed));
    }
    return states;
}

Store::Pruned Store::prune(int retentionDays, int batch)
{
    connection_.exec(pruneCredentials, Params(batch));
    if (retentionDays == 0)
        return Pruned {};
    return Pruned { connection_.exec(pruneEvents, Params(retentionDays, batch)).affected(),
        connection_.exec(pruneDecisions, Params(retentionDays, batch)).affected() };
}

bool Store::firstUseOfCredential(std::string_view credential)
{
    const XXH128_hash_t digest = XXH3_128bits(credential.data(), credential.size());
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(digest.high64),
        static_cast<unsigned long long>(digest.low64));
    return connection_.exec(insertCredentialUse, Params(std::string(hex))).affected() == 1;
}

std::vector<std::pair<ChainState, std::int64_t>> Store::endedCounts()
{
    return connection_.exec(selectEndedCounts).all([](const Result& r, int row) {
        return std::pair { chainStateFromName(r.text(row, 0)).value_or(ChainState::Failed), r.int64(row, 1) };
    });
}

Json Store::detail(const ChainRow& chain)
{
    Json jobs = Json::array();
    std::optional<std::int64_t> previousEnd;
    for (const JobRow& job : this->jobs(chain.id)) {
        Json row { { "seq", job.seq }, { "job_id", job.slurmJobId }, { "state", job.state },
            { "submit_unix", optionalJson(job.submitTime) }, { "start_unix", optionalJson(job.startTime) },
            { "end_unix", optionalJson(job.endTime) }, { "time_limit_s", optionalJson(job.timeLimitSeconds) },
            { "exit_code", job.exitCode ? Json(*job.exitCode) : Json() }, { "withdrawn", job.withdrawn } };
        // Positive: a gap after the previous job ended; negative: the two ran together. A withdrawn job
        // never ran: it is no link of the chain.
        if (!job.withdrawn) {
            if (previousEnd && job.startTime)
                row["interruption_s"] = *job.startTime - *previousEnd;
            previousEnd = job.endTime;
        }
        jobs.push_back(row);
    }
    const Json checkpoints
        = connection_.exec(selectCheckpoints, Params(chain.id)).all([](const Result& r, int row) {
              return Json { { "iteration", r.int64(row, 0) }, { "path", r.text(row, 1) },
                  { "created_unix", r.real(row, 2) }, { "total_bytes", r.int64(row, 3) },
                  { "training_done", r.boolean(row, 4) }, { "final", r.boolean(row, 5) },
                  { "job_id", optionalJson(r.optInt64(row, 6)) } };
          });
    const Json decisions
        = connection_.exec(selectDecisions, Params(chain.id)).all([](const Result& r, int row) {
              const Json inputs = r.json(row, 3);
              return Json { { "time_unix", r.real(row, 0) }, { "policy", r.text(row, 1) },
                  { "action", r.text(row, 2) }, { "inputs", inputs },
                  { "predicted_wait_s", inputs.value("predicted_wait_s", Json()) },
                  { "outcome", r.optText(row, 4) ? Json(*r.optText(row, 4)) : Json() } };
          });
    const Json handovers
        = connection_.exec(selectHandovers, Params(chain.id)).all([](const Result& r, int row) {
              const bool completed = r.optReal(row, 4).has_value();
              return Json { { "generation", r.int64(row, 0) }, { "predecessor_job_id", r.int64(row, 1) },
                  { "successor_job_id", r.int64(row, 2) }, { "from_job", r.int64(row, 1) },
                  { "to_job", r.int64(row, 2) }, { "time_unix", r.real(row, 3) },
                  { "completed_unix", completed ? Json(*r.optReal(row, 4)) : Json() },
                  { "handover_s", r.optReal(row, 5) ? Json(*r.optReal(row, 5)) : Json() },
                  { "outcome", completed ? "completed" : "signalled" } };
          });
    // How its next job is submitted, without the script itself.
    Json submitsWith = Json::object();
    if (const Json spec = this->spec(chain.id); spec.is_object())
        for (const char* key : { "source", "sbatch_args", "workdir", "note" })
            if (spec.contains(key))
                submitsWith[key] = spec[key];
    return Json { { "chain", chain.toJson() }, { "jobs", jobs }, { "checkpoints", checkpoints },
        { "decisions", decisions }, { "handovers", handovers }, { "submits_with", submitsWith } };
}

} // namespace baton::service
