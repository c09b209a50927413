#include "job_store.hpp"

#include "db/errors.hpp"

#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

namespace baton::service {

using Json = nlohmann::json;

namespace {

// Job rows as slurmctld reports them, a batch at a time; a job already recorded keeps its chain and seq.
// A row that would be a second live job of its (chain, seq) is left out (and returned missing) instead of
// failing the batch for every chain.
constexpr db::Statement upsertJobRows { "job_upsert",
    "INSERT INTO jobs (chain_id, slurm_job_id, seq, name, submit_time, start_time, end_time,"
    " time_limit_s, nodes, state, exit_code, owner_uid, withdrawn)"
    " SELECT chain, job, seq, name, to_timestamp(submitted), to_timestamp(started), to_timestamp(ended),"
    " time_limit_s, nodes, state, exit_code, owner_uid, withdrawn FROM jsonb_to_recordset($1::jsonb)"
    " AS w(chain bigint, job bigint, seq int, name text, submitted bigint, started bigint, ended bigint,"
    " time_limit_s bigint, nodes int, state text, exit_code int, owner_uid bigint, withdrawn boolean)"
    " WHERE w.withdrawn OR NOT EXISTS (SELECT 1 FROM jobs j WHERE j.chain_id = w.chain"
    " AND j.seq = w.seq AND j.slurm_job_id <> w.job AND NOT j.withdrawn)"
    " ON CONFLICT (slurm_job_id) DO UPDATE SET submit_time = EXCLUDED.submit_time,"
    " start_time = EXCLUDED.start_time, end_time = EXCLUDED.end_time, time_limit_s = EXCLUDED.time_limit_s,"
    " nodes = EXCLUDED.nodes, state = EXCLUDED.state, exit_code = EXCLUDED.exit_code,"
    " withdrawn = EXCLUDED.withdrawn RETURNING slurm_job_id",
    true };
constexpr char jobColumns[]
    = "SELECT seq, slurm_job_id, state, extract(epoch FROM submit_time)::bigint AS submit_unix,"
      " extract(epoch FROM start_time)::bigint AS start_unix, extract(epoch FROM end_time)::bigint AS "
      "end_unix,"
      " time_limit_s, exit_code, withdrawn, chain_id FROM jobs";
constexpr auto jobsOfChainSql = db::joinSql(jobColumns, " WHERE chain_id = $1 ORDER BY seq");
constexpr auto jobBySlurmIdSql = db::joinSql(jobColumns, " WHERE slurm_job_id = $1");
constexpr db::Statement selectJobs { "job_of_chain", jobsOfChainSql.data(), true };
constexpr db::Statement selectJobBySlurmId { "job_by_slurm_id", jobBySlurmIdSql.data(), true };

std::optional<std::int64_t> positive(std::int64_t value)
{
    return value > 0 ? std::optional<std::int64_t>(value) : std::nullopt;
}

Json optionalJson(const std::optional<std::int64_t>& value)
{
    return value ? Json(*value) : Json();
}

Json rowOf(const JobStore::Write& write)
{
    const ClusterJob& job = write.job;
    // slurmctld's clock may put an end before a start (a job cancelled at its start): the row's check
    // allows no such thing, so the end is taken as the start.
    const auto started = positive(job.startTime);
    auto ended = positive(job.endTime);
    if (started && ended && *ended < *started)
        ended = started;
    return Json { { "chain", write.chainId }, { "job", job.id }, { "seq", write.seq }, { "name", job.name },
        { "submitted", optionalJson(positive(job.submitTime)) }, { "started", optionalJson(started) },
        { "ended", optionalJson(ended) }, { "time_limit_s", optionalJson(positive(job.timeLimitSeconds)) },
        { "nodes", job.nodes > 0 ? job.nodes : 1 }, { "state", job.state },
        { "exit_code", job.exitCode ? Json(*job.exitCode) : Json() },
        { "owner_uid", job.userId >= 0 ? Json(job.userId) : Json() }, { "withdrawn", job.withdrawn() } };
}

// One row per job: a statement may not update a row twice. A job written twice keeps the first write's
// chain and seq (as two statements would: the second only updates) and the last one's facts.
std::vector<JobStore::Write> oneRowPerJob(std::span<const JobStore::Write> writes)
{
    std::vector<JobStore::Write> rows;
    std::unordered_map<std::int64_t, std::size_t> rowOfJob;
    for (const JobStore::Write& write : writes) {
        if (const auto [at, added] = rowOfJob.emplace(write.job.id, rows.size()); !added) {
            rows[at->second].job = write.job;
            continue;
        }
        rows.push_back(write);
    }
    return rows;
}

} // namespace

JobColumns::JobColumns(const db::Result& r, std::string_view prefix)
    : at_(r.columns(names, prefix))
{ }

JobRow JobColumns::read(const db::Result& r, int row) const
{
    JobRow job;
    job.seq = static_cast<int>(r.int64(row, at_[Seq]));
    job.slurmJobId = r.int64(row, at_[SlurmJobId]);
    job.state = std::string(r.text(row, at_[State]));
    job.submitTime = r.optInt64(row, at_[Submit]);
    job.startTime = r.optInt64(row, at_[Start]);
    job.endTime = r.optInt64(row, at_[End]);
    job.timeLimitSeconds = r.optInt64(row, at_[TimeLimit]);
    if (auto code = r.optInt64(row, at_[ExitCode]))
        job.exitCode = static_cast<int>(*code);
    job.withdrawn = r.boolean(row, at_[Withdrawn]);
    return job;
}

std::vector<JobStore::Rejected> JobStore::upsert(std::span<const Write> writes)
{
    const std::vector<Write> rows = oneRowPerJob(writes);
    std::vector<Rejected> rejected;
    const auto write = [&](std::span<const Write> part) {
        Json batch = Json::array();
        for (const Write& w : part)
            batch.push_back(rowOf(w));
        const db::Result result = connection_.exec(upsertJobRows, db::Params(batch));
        const int column = result.column("slurm_job_id");
        std::unordered_set<std::int64_t> written;
        for (int row = 0; row < result.rows(); ++row)
            written.insert(result.int64(row, column));
        for (const Write& w : part)
            if (!written.contains(w.job.id))
                rejected.push_back(Rejected { w.chainId, w.job.id,
                    "job " + std::to_string(w.job.id) + " would be a second job of seq " + std::to_string(w.seq) });
    };
    if (rows.empty())
        return rejected;
    try {
        write(rows);
    } catch (const db::DbError& error) {
        if (!db::isChainDataError(error))
            throw;
        // One chain's row is refused: write them one by one, so that only that chain is held up.
        for (const Write& one : rows) {
            try {
                write(std::span(&one, 1));
            } catch (const db::DbError& oneError) {
                if (!db::isChainDataError(oneError))
                    throw;
                rejected.push_back(Rejected { one.chainId, one.job.id, oneError.what() });
            }
        }
    }
    return rejected;
}

std::vector<JobRow> JobStore::ofChain(std::int64_t chainId)
{
    const db::Result result = connection_.exec(selectJobs, db::Params(chainId));
    const JobColumns columns(result);
    return result.all([&](const db::Result& r, int row) { return columns.read(r, row); });
}

std::optional<JobStore::Owned> JobStore::bySlurmId(std::int64_t slurmJobId)
{
    const db::Result result = connection_.exec(selectJobBySlurmId, db::Params(slurmJobId));
    if (result.rows() == 0)
        return std::nullopt;
    return Owned { result.int64(0, result.column("chain_id")), JobColumns(result).read(result, 0) };
}

} // namespace baton::service
