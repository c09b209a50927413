// Chains, their jobs, checkpoints and tuning state.
#include "repositories.hpp"

namespace baton::db {

namespace {

constexpr Statement insertChain { "insert_chain",
    "INSERT INTO chains (name, chain_dir, state) VALUES ($1, $2, $3) RETURNING id" };
constexpr Statement selectChain { "select_chain",
    "SELECT id, name, chain_dir, state, extract(epoch FROM created_at)::bigint FROM chains WHERE id = $1",
    true };
constexpr Statement selectChainByName { "select_chain_by_name",
    "SELECT id, name, chain_dir, state, extract(epoch FROM created_at)::bigint FROM chains WHERE name = $1",
    true };
constexpr Statement updateChainState { "update_chain_state",
    "UPDATE chains SET state = $2, updated_at = now() WHERE id = $1", true };

constexpr Statement insertJob { "insert_job",
    "INSERT INTO jobs (chain_id, slurm_job_id, restart_count, name, submit_time, start_time, end_time,"
    " time_limit_s, nodes, state, reason)"
    " VALUES ($1, $2, $3, $4, to_timestamp($5), to_timestamp($6), to_timestamp($7), $8, $9, $10, $11)"
    " RETURNING id" };
#define BATON_JOB_COLUMNS                                                                                    \
    "SELECT id, chain_id, slurm_job_id, restart_count, name, extract(epoch FROM submit_time)::bigint,"       \
    " extract(epoch FROM start_time)::bigint, extract(epoch FROM end_time)::bigint, time_limit_s, nodes,"    \
    " state, reason FROM jobs "
constexpr Statement selectJob { "select_job", BATON_JOB_COLUMNS "WHERE id = $1", true };
constexpr Statement selectJobBySlurmId { "select_job_by_slurm_id",
    BATON_JOB_COLUMNS "WHERE slurm_job_id = $1", true };
constexpr Statement selectJobsOfChain { "select_jobs_of_chain",
    BATON_JOB_COLUMNS "WHERE chain_id = $1 ORDER BY restart_count", true };
#undef BATON_JOB_COLUMNS
constexpr Statement updateJob { "update_job",
    "UPDATE jobs SET submit_time = to_timestamp($2), start_time = to_timestamp($3), end_time = "
    "to_timestamp($4),"
    " time_limit_s = $5, nodes = $6, state = $7, reason = $8 WHERE slurm_job_id = $1",
    true };

constexpr Statement insertCheckpoint { "insert_checkpoint",
    "WITH added AS (INSERT INTO checkpoints (chain_id, slurm_job_id, iteration, epoch, path, total_bytes,"
    " snapshot_s, persist_s, created_at, manifest)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, to_timestamp($9), $10)"
    " ON CONFLICT (chain_id, iteration) DO NOTHING RETURNING id)"
    " SELECT id FROM added UNION ALL SELECT id FROM checkpoints WHERE chain_id = $1 AND iteration = $3",
    true };
#define BATON_CHECKPOINT_COLUMNS                                                                             \
    "SELECT id, chain_id, slurm_job_id, iteration, epoch, path, total_bytes, snapshot_s, persist_s,"         \
    " extract(epoch FROM created_at)::bigint, manifest FROM checkpoints "
constexpr Statement selectCheckpoint { "select_checkpoint", BATON_CHECKPOINT_COLUMNS "WHERE id = $1", true };
constexpr Statement selectLatestCheckpoint { "select_latest_checkpoint",
    BATON_CHECKPOINT_COLUMNS "WHERE chain_id = $1 ORDER BY iteration DESC LIMIT 1", true };
#undef BATON_CHECKPOINT_COLUMNS

constexpr Statement upsertTuning { "upsert_tuning",
    "INSERT INTO tuning (chain_id, profile, interval_k, iteration_s, snapshot_s, persist_s, overhead_percent)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7)"
    " ON CONFLICT (chain_id) DO UPDATE SET profile = EXCLUDED.profile, interval_k = EXCLUDED.interval_k,"
    " iteration_s = EXCLUDED.iteration_s, snapshot_s = EXCLUDED.snapshot_s, persist_s = EXCLUDED.persist_s,"
    " overhead_percent = EXCLUDED.overhead_percent, updated_at = now()",
    true };
constexpr Statement selectTuning { "select_tuning",
    "SELECT chain_id, profile, interval_k, iteration_s, snapshot_s, persist_s, overhead_percent"
    " FROM tuning WHERE chain_id = $1",
    true };

Chain chainAt(const Result& r, int row)
{
    return Chain { r.int64(row, 0), std::string(r.text(row, 1)), r.optText(row, 2),
        std::string(r.text(row, 3)), r.int64(row, 4) };
}

std::optional<std::int32_t> optInt32(const Result& r, int row, int column)
{
    auto value = r.optInt64(row, column);
    return value ? std::optional<std::int32_t>(static_cast<std::int32_t>(*value)) : std::nullopt;
}

Job jobAt(const Result& r, int row)
{
    Job job;
    job.id = r.int64(row, 0);
    job.chainId = r.int64(row, 1);
    job.slurmJobId = r.int64(row, 2);
    job.restartCount = static_cast<std::int32_t>(r.int64(row, 3));
    job.name = r.optText(row, 4);
    job.submitTime = r.optInt64(row, 5);
    job.startTime = r.optInt64(row, 6);
    job.endTime = r.optInt64(row, 7);
    job.timeLimitSeconds = r.optInt64(row, 8);
    job.nodes = optInt32(r, row, 9);
    job.state = std::string(r.text(row, 10));
    job.reason = r.optText(row, 11);
    return job;
}

Checkpoint checkpointAt(const Result& r, int row)
{
    Checkpoint checkpoint;
    checkpoint.id = r.int64(row, 0);
    checkpoint.chainId = r.int64(row, 1);
    checkpoint.slurmJobId = r.optInt64(row, 2);
    checkpoint.iteration = r.int64(row, 3);
    checkpoint.epoch = r.int64(row, 4);
    checkpoint.path = std::string(r.text(row, 5));
    checkpoint.totalBytes = r.int64(row, 6);
    checkpoint.snapshotSeconds = r.optReal(row, 7);
    checkpoint.persistSeconds = r.optReal(row, 8);
    checkpoint.createdAt = r.int64(row, 9);
    checkpoint.manifest = r.json(row, 10);
    return checkpoint;
}

Tuning tuningAt(const Result& r, int row)
{
    return Tuning { r.int64(row, 0), std::string(r.text(row, 1)), static_cast<std::int32_t>(r.int64(row, 2)),
        r.optReal(row, 3), r.optReal(row, 4), r.optReal(row, 5), r.optReal(row, 6) };
}

} // namespace

std::int64_t ChainRepository::insert(const Chain& chain)
{
    return connection_.exec(insertChain, Params(chain.name, chain.chainDir, chain.state)).int64(0, 0);
}

std::optional<Chain> ChainRepository::get(std::int64_t id)
{
    return connection_.exec(selectChain, Params(id)).first(chainAt);
}

std::optional<Chain> ChainRepository::findByName(std::string_view name)
{
    return connection_.exec(selectChainByName, Params(name)).first(chainAt);
}

bool ChainRepository::setState(std::int64_t id, std::string_view state)
{
    return connection_.exec(updateChainState, Params(id, state)).affected() == 1;
}

std::int64_t JobRepository::insert(const Job& job)
{
    return connection_
        .exec(insertJob,
            Params(job.chainId, job.slurmJobId, job.restartCount, job.name, job.submitTime, job.startTime,
                job.endTime, job.timeLimitSeconds, job.nodes, job.state, job.reason))
        .int64(0, 0);
}

std::optional<Job> JobRepository::get(std::int64_t id)
{
    return connection_.exec(selectJob, Params(id)).first(jobAt);
}

std::optional<Job> JobRepository::findBySlurmId(std::int64_t slurmJobId)
{
    return connection_.exec(selectJobBySlurmId, Params(slurmJobId)).first(jobAt);
}

std::vector<Job> JobRepository::forChain(std::int64_t chainId)
{
    return connection_.exec(selectJobsOfChain, Params(chainId)).all(jobAt);
}

bool JobRepository::update(const Job& job)
{
    return connection_
               .exec(updateJob,
                   Params(job.slurmJobId, job.submitTime, job.startTime, job.endTime, job.timeLimitSeconds,
                       job.nodes, job.state, job.reason))
               .affected()
        == 1;
}

std::int64_t CheckpointRepository::insert(const Checkpoint& c)
{
    return connection_
        .exec(insertCheckpoint,
            Params(c.chainId, c.slurmJobId, c.iteration, c.epoch, c.path, c.totalBytes, c.snapshotSeconds,
                c.persistSeconds, c.createdAt, c.manifest))
        .int64(0, 0);
}

std::optional<Checkpoint> CheckpointRepository::get(std::int64_t id)
{
    return connection_.exec(selectCheckpoint, Params(id)).first(checkpointAt);
}

std::optional<Checkpoint> CheckpointRepository::latest(std::int64_t chainId)
{
    return connection_.exec(selectLatestCheckpoint, Params(chainId)).first(checkpointAt);
}

void TuningRepository::upsert(const Tuning& t)
{
    connection_.exec(upsertTuning,
        Params(t.chainId, t.profile, t.intervalK, t.iterationSeconds, t.snapshotSeconds, t.persistSeconds,
            t.overheadPercent));
}

std::optional<Tuning> TuningRepository::get(std::int64_t chainId)
{
    return connection_.exec(selectTuning, Params(chainId)).first(tuningAt);
}

} // namespace baton::db
