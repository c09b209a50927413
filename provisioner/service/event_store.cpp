#include "event_store.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>

#include <xxhash.h>

namespace baton::service {

namespace {

constexpr db::Statement insertEventRow { "event_insert",
    "INSERT INTO events (idempotency_key, kind, chain_name, slurm_job_id, payload, sender_uid)"
    " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (idempotency_key) DO NOTHING" };
// Fair between jobs: each job's oldest waiting event first, then each one's second, and so on, so that
// one job's flood (a user's thousands of srun steps) delays no other job's report by a tick. A job's own
// events keep their order; events of different jobs have none to keep.
constexpr db::Statement selectUnprocessed { "event_unprocessed",
    "SELECT id, kind, chain_name, slurm_job_id, payload FROM ("
    " SELECT id, kind, chain_name, slurm_job_id, payload,"
    " row_number() OVER (PARTITION BY slurm_job_id ORDER BY id) AS turn"
    " FROM events WHERE processed_at IS NULL) AS waiting"
    " ORDER BY turn, id LIMIT $1",
    true };
// The plugin's step reports for one job (index events_job_idx), for checkpointSignalScope.
constexpr db::Statement selectStepEvents { "event_steps",
    "SELECT kind, payload->>'step' AS step, payload->>'requeue_count' AS requeue_count FROM events"
    " WHERE slurm_job_id = $1 AND kind IN ('step_start', 'task_exit')",
    true };
constexpr db::Statement updateProcessedMany { "event_processed",
    "UPDATE events SET processed_at = now() WHERE id = ANY($1::bigint[])", true };
constexpr db::Statement updateDeadLetter { "event_dead_letter",
    "UPDATE events SET processed_at = now(), error = $2 WHERE id = $1", true };
// Retention: the oldest processed events past the period, a batch at a time (the time index finds them),
// by the database's clock.
constexpr db::Statement pruneEvents { "event_prune",
    "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE processed_at IS NOT NULL"
    " AND received_at < now() - make_interval(days => $1) ORDER BY received_at LIMIT $2)" };
// A credential lives at most munged's TTL (5 min by default): an hour covers every configured one.
constexpr db::Statement pruneCredentials { "credential_prune",
    "DELETE FROM credentials_used WHERE digest IN (SELECT digest FROM credentials_used"
    " WHERE used_at < now() - interval '1 hour' ORDER BY used_at LIMIT $1)" };
constexpr db::Statement insertCredentialUse { "credential_use",
    "INSERT INTO credentials_used (digest) VALUES (decode($1, 'hex')) ON CONFLICT DO NOTHING" };

// A PostgreSQL array literal of ids, for `= ANY($1::bigint[])`.
std::string bigintArray(const std::vector<std::int64_t>& ids)
{
    std::string text = "{";
    for (const std::int64_t id : ids)
        text += (text.size() > 1 ? "," : "") + std::to_string(id);
    return text + "}";
}

struct StepReport {
    bool exit;
    std::string step;
    std::int64_t requeue;
};

} // namespace

bool EventStore::insert(const std::string& key, const std::string& kind, const std::optional<std::string>& chain,
    std::optional<std::int64_t> jobId, const nlohmann::json& payload, std::int64_t senderUid)
{
    return connection_.exec(insertEventRow, db::Params(key, kind, chain, jobId, payload, senderUid)).affected() == 1;
}

std::vector<EventRow> EventStore::unprocessed(int limit)
{
    const db::Result result = connection_.exec(selectUnprocessed, db::Params(limit));
    const int id = result.column("id"), kind = result.column("kind"), chain = result.column("chain_name"),
              job = result.column("slurm_job_id"), payload = result.column("payload");
    return result.all([&](const db::Result& r, int row) {
        return EventRow { r.int64(row, id), std::string(r.text(row, kind)), r.optText(row, chain),
            r.optInt64(row, job), r.json(row, payload) };
    });
}

void EventStore::markProcessed(const std::vector<std::int64_t>& eventIds)
{
    if (eventIds.empty())
        return;
    connection_.exec(updateProcessedMany, db::Params(bigintArray(eventIds)));
}

void EventStore::deadLetter(std::int64_t eventId, const std::string& error)
{
    connection_.exec(updateDeadLetter, db::Params(eventId, error));
}

SignalScope EventStore::checkpointSignalScope(std::int64_t slurmJobId)
{
    const db::Result result = connection_.exec(selectStepEvents, db::Params(slurmJobId));
    const int kind = result.column("kind"), step = result.column("step"), requeue = result.column("requeue_count");
    // Payloads are hints (spooled ones are user-written): a requeue count that is not a number is 0.
    const auto reports = result.all([&](const db::Result& r, int row) {
        std::int64_t count = 0;
        if (const auto text = r.optText(row, requeue))
            std::from_chars(text->data(), text->data() + text->size(), count);
        return StepReport { r.text(row, kind) == "task_exit", r.optText(row, step).value_or(""), count };
    });
    // Only the job's latest run counts: a requeued job's earlier steps ended with that run.
    std::int64_t latest = 0;
    for (const auto& report : reports)
        latest = std::max(latest, report.requeue);
    const auto isSrunStep = [](const std::string& name) {
        return !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); });
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

std::uint64_t EventStore::prune(int retentionDays, int batch)
{
    return connection_.exec(pruneEvents, db::Params(retentionDays, batch)).affected();
}

bool CredentialStore::firstUse(std::string_view credentialBytes)
{
    const XXH128_hash_t digest = XXH3_128bits(credentialBytes.data(), credentialBytes.size());
    char hex[33];
    std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(digest.high64),
        static_cast<unsigned long long>(digest.low64));
    return connection_.exec(insertCredentialUse, db::Params(std::string(hex))).affected() == 1;
}

void CredentialStore::prune(int batch)
{
    connection_.exec(pruneCredentials, db::Params(batch));
}

} // namespace baton::service
