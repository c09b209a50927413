#include "chain_views.hpp"

#include "checkpoint_store.hpp"
#include "job_store.hpp"

#include <optional>

namespace baton::service {

using Json = nlohmann::json;

namespace {

constexpr db::Statement selectCheckpoints { "view_checkpoints",
    "SELECT iteration, path, extract(epoch FROM created_at) AS created_unix, total_bytes, training_done, final,"
    " slurm_job_id FROM checkpoints WHERE chain_id = $1 ORDER BY iteration DESC LIMIT 50",
    true };
constexpr db::Statement selectDecisions { "view_decisions",
    "SELECT extract(epoch FROM decided_at) AS decided_unix, policy, action, inputs, outcome FROM decisions"
    " WHERE chain_id = $1 ORDER BY id DESC LIMIT 50",
    true };
constexpr db::Statement selectHandovers { "view_handovers",
    "SELECT predecessor_seq, predecessor_job_id, successor_job_id, extract(epoch FROM signalled_at) AS "
    "signalled_unix,"
    " extract(epoch FROM completed_at) AS completed_unix, handover_s FROM handovers WHERE chain_id = $1"
    " ORDER BY predecessor_seq",
    true };

template<typename Value> Json orNull(const std::optional<Value>& value)
{
    return value ? Json(*value) : Json();
}

Json checkpointView(const CheckpointRow& checkpoint)
{
    return Json { { "iteration", checkpoint.iteration }, { "path", checkpoint.path },
        { "created_unix", checkpoint.createdAt }, { "training_done", checkpoint.trainingDone },
        { "final", checkpoint.final }, { "job_id", orNull(checkpoint.slurmJobId) } };
}

} // namespace

Json chainView(const ChainRow& chain, const std::string& servicePolicy)
{
    return Json {
        { "id", chain.id },
        { "owner", chain.ownerName },
        { "owner_uid", chain.ownerUid },
        { "name", chain.name },
        { "state", nameOf(chain.state) },
        { "seq", chain.seq },
        { "last_handover_seq", chain.lastHandoverSeq },
        { "retries", chain.retries },
        { "reason", orNull(chain.reason) },
        { "chain_dir", orNull(chain.chainDir) },
        { "updated_unix", chain.updatedAt },
        { "policy", chain.policy.value_or(servicePolicy) },
        { "policy_from", chain.policy ? "chain" : "service" },
    };
}

namespace {

// The job ids of a chain's current and pending jobs (its seq, seq + 1 and a second successor's seq + 2),
// where it has them.
void addCurrentJobs(Json& view, const ChainRow& chain, const std::vector<JobRow>& jobs)
{
    for (const JobRow& job : jobs) {
        if (job.withdrawn)
            continue;
        if (job.seq == chain.seq)
            view["current_job"] = job.slurmJobId;
        if (job.seq == chain.seq + 1)
            view["pending_job"] = job.slurmJobId;
        if (job.seq == chain.seq + 2)
            view["second_pending_job"] = job.slurmJobId;
    }
}

} // namespace

Json ChainViews::summary(const ChainRow& chain)
{
    Json row = chainView(chain, servicePolicy_);
    addCurrentJobs(row, chain, JobStore(connection_).ofChain(chain.id));
    if (const auto newest = CheckpointStore(connection_).latest(chain.id))
        row["checkpoint"] = checkpointView(*newest);
    return row;
}

Json ChainViews::detail(const ChainRow& chain)
{
    // How its next job is submitted, without the script itself.
    Json submitsWith = Json::object();
    if (const Json spec = ChainStore(connection_).spec(chain.id); spec.is_object())
        for (const char* key : { "source", "sbatch_args", "workdir", "note" })
            if (spec.contains(key))
                submitsWith[key] = spec[key];
    const std::vector<JobRow> jobRows = JobStore(connection_).ofChain(chain.id);
    Json view = chainView(chain, servicePolicy_);
    addCurrentJobs(view, chain, jobRows);
    return Json { { "chain", view }, { "jobs", jobs(jobRows) }, { "checkpoints", checkpoints(chain) },
        { "decisions", decisions(chain) }, { "handovers", handovers(chain) }, { "submits_with", submitsWith } };
}

Json ChainViews::jobs(const std::vector<JobRow>& rows)
{
    Json jobs = Json::array();
    std::optional<std::int64_t> previousEnd;
    for (const JobRow& job : rows) {
        Json row { { "seq", job.seq }, { "job_id", job.slurmJobId }, { "state", job.state },
            { "submit_unix", orNull(job.submitTime) }, { "start_unix", orNull(job.startTime) },
            { "end_unix", orNull(job.endTime) }, { "time_limit_s", orNull(job.timeLimitSeconds) },
            { "exit_code", orNull(job.exitCode) }, { "withdrawn", job.withdrawn } };
        // Positive: a gap after the previous job ended; negative: the two ran together. A withdrawn job
        // never ran: it is no link of the chain.
        if (!job.withdrawn) {
            if (previousEnd && job.startTime)
                row["interruption_s"] = *job.startTime - *previousEnd;
            previousEnd = job.endTime;
        }
        jobs.push_back(row);
    }
    return jobs;
}

Json ChainViews::checkpoints(const ChainRow& chain)
{
    const db::Result result = connection_.exec(selectCheckpoints, db::Params(chain.id));
    const int iteration = result.column("iteration"), path = result.column("path"),
              created = result.column("created_unix"), bytes = result.column("total_bytes"),
              done = result.column("training_done"), final = result.column("final"),
              job = result.column("slurm_job_id");
    return result.all([&](const db::Result& r, int row) {
        return Json { { "iteration", r.int64(row, iteration) }, { "path", r.text(row, path) },
            { "created_unix", r.real(row, created) }, { "total_bytes", r.int64(row, bytes) },
            { "training_done", r.boolean(row, done) }, { "final", r.boolean(row, final) },
            { "job_id", orNull(r.optInt64(row, job)) } };
    });
}

Json ChainViews::decisions(const ChainRow& chain)
{
    const db::Result result = connection_.exec(selectDecisions, db::Params(chain.id));
    const int decided = result.column("decided_unix"), policy = result.column("policy"),
              action = result.column("action"), inputs = result.column("inputs"), outcome = result.column("outcome");
    return result.all([&](const db::Result& r, int row) {
        const Json seen = r.json(row, inputs);
        return Json { { "time_unix", r.real(row, decided) }, { "policy", r.text(row, policy) },
            { "action", r.text(row, action) }, { "inputs", seen },
            { "predicted_wait_s", seen.value("predicted_wait_s", Json()) },
            { "outcome", orNull(r.optText(row, outcome)) } };
    });
}

Json ChainViews::handovers(const ChainRow& chain)
{
    const db::Result result = connection_.exec(selectHandovers, db::Params(chain.id));
    const int predecessorSeq = result.column("predecessor_seq"), from = result.column("predecessor_job_id"),
              to = result.column("successor_job_id"), signalled = result.column("signalled_unix"),
              completedAt = result.column("completed_unix"), seconds = result.column("handover_s");
    return result.all([&](const db::Result& r, int row) {
        const auto completed = r.optReal(row, completedAt);
        return Json { { "predecessor_seq", r.int64(row, predecessorSeq) },
            { "predecessor_job_id", r.int64(row, from) }, { "successor_job_id", r.int64(row, to) },
            { "from_job", r.int64(row, from) }, { "to_job", r.int64(row, to) },
            { "time_unix", r.real(row, signalled) }, { "completed_unix", orNull(completed) },
            { "handover_s", orNull(r.optReal(row, seconds)) },
            { "outcome", completed ? "completed" : "signalled" } };
    });
}

} // namespace baton::service
