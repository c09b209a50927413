#include "event_subject.hpp"

namespace baton::service {

namespace {

// $1: the job, $2: its owner (null when the queue does not hold it), $3: the event's chain name. A job
// baton knows decides the chain by itself; the owner's chain of that name is read only for a job it
// does not know. At most one live job row per (chain, seq) exists, so "no live row without an end" is
// "the current job ended or has no row".
constexpr auto eventSubjectSql = db::joinSql(
    "WITH known AS (SELECT chain_id FROM jobs WHERE slurm_job_id = $1),"
    " c AS (SELECT * FROM chains WHERE id IN (SELECT chain_id FROM known)"
    " UNION ALL SELECT * FROM chains WHERE NOT EXISTS (SELECT 1 FROM known)"
    " AND owner_uid = $2::bigint AND name = $3) ",
    chainColumns,
    ", EXISTS (SELECT 1 FROM known) AS job_known,"
    " NOT EXISTS (SELECT 1 FROM jobs j WHERE j.chain_id = c.id AND j.seq = c.seq AND NOT j.withdrawn"
    " AND j.end_time IS NULL) AS current_ended,"
    " (SELECT s.state FROM submissions s WHERE s.chain_id = c.id AND s.seq = c.seq + 1) AS next_state"
    " FROM c");
constexpr db::Statement selectEventSubject { "event_subject", eventSubjectSql.data(), true };

} // namespace

EventSubject readEventSubject(db::Connection& connection, std::int64_t slurmJobId,
    std::optional<std::int64_t> ownerUid, const std::string& chainName)
{
    const db::Result result = connection.exec(selectEventSubject, db::Params(slurmJobId, ownerUid, chainName));
    EventSubject subject;
    if (result.rows() == 0)
        return subject;
    subject.chain = ChainColumns(result).read(result, 0);
    subject.jobKnown = result.boolean(0, result.column("job_known"));
    subject.currentEnded = result.boolean(0, result.column("current_ended"));
    subject.nextSubmissionState = result.optText(0, result.column("next_state"));
    return subject;
}

EventJoin joinOf(const PluginEvent& event, const ClusterJob* job, const EventSubject& subject)
{
    // Only a job's first step registers or adopts it; a job baton knows, or one the queue does not hold
    // (so its owner is unknown), joins nothing.
    if (subject.jobKnown || !job || event.kind != "step_start")
        return EventJoin::AsRead;
    if (!subject.chain)
        return EventJoin::Register;
    const bool submittedByBaton = job->comment.rfind("baton:", 0) == 0;
    const std::optional<std::string>& next = subject.nextSubmissionState;
    const bool nextGivenUp = !next || *next == "failed" || *next == "cancelled";
    if (isAllowed(subject.chain->state, ChainEvent::JobAdopted) && !submittedByBaton && subject.currentEnded
        && nextGivenUp)
        return EventJoin::Adopt;
    return EventJoin::AsRead;
}

} // namespace baton::service
