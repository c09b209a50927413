#include "trace_store.hpp"

#include "copy_in.hpp"
#include "errors.hpp"
#include "transaction.hpp"

namespace baton::db {

namespace {

constexpr Statement deleteTraceByName { "delete_trace_by_name", "DELETE FROM traces WHERE name = $1" };
constexpr Statement insertTrace { "insert_trace",
    "INSERT INTO traces (name, format, source) VALUES ($1, $2, $3) RETURNING id" };
// A COPY is one statement: the session's statement_timeout would cut a long import off while the
// client is still reading and sending rows. The import lifts it for its own transaction only
// (is_local): every wait of the client still has its call deadline, which runs per call, not per
// import.
constexpr Statement liftStatementTimeout { "lift_statement_timeout",
    "SELECT set_config('statement_timeout', '0', true)" };
constexpr Statement finishTrace { "finish_trace",
    "UPDATE traces SET rows_read = $2, rows_accepted = $3, rejected = $4 WHERE id = $1" };
constexpr const char* copyTraceJobs
    = "COPY trace_jobs (trace_id, seq, job_id, name, user_name, submit_time, start_time, end_time, "
      "time_limit_s,"
      " nodes, priority, exit_code, state, requested_procs, requested_time_s, run_time_s, wait_s)"
      " FROM STDIN WITH (FORMAT binary)";
constexpr std::int16_t traceJobColumns = 17;

constexpr Statement selectTraces { "select_traces",
    "SELECT id, name, format, source, to_char(imported_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"
    " AS imported, rows_read, rows_accepted FROM traces ORDER BY id",
    true };
constexpr Statement selectTraceId { "select_trace_id", "SELECT id FROM traces WHERE name = $1", true };
// Wait = start - submit over the jobs that started; quantiles are percentile_cont (interpolated).
constexpr Statement selectTraceStats { "select_trace_stats",
    "SELECT count(*) AS jobs, count(start_time) AS started,"
    " extract(epoch FROM min(submit_time))::bigint AS first_submit,"
    " extract(epoch FROM max(coalesce(end_time, start_time, submit_time)))::bigint AS last_event,"
    " percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM start_time - submit_time)) AS wait_p50,"
    " percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM start_time - submit_time)) AS wait_p90,"
    " percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM start_time - submit_time)) AS wait_p99,"
    " avg(extract(epoch FROM start_time - submit_time))::double precision AS wait_mean,"
    " coalesce(sum(nodes * coalesce(extract(epoch FROM end_time - start_time), run_time_s)), 0)::double"
    " precision AS node_seconds FROM trace_jobs WHERE trace_id = $1",
    true };
constexpr Statement selectNodeMix { "select_trace_node_mix",
    "SELECT nodes, count(*) AS jobs FROM trace_jobs WHERE trace_id = $1 GROUP BY nodes"
    " ORDER BY count(*) DESC, nodes",
    true };

template<typename T> void optionalInt(CopyIn& copy, T value)
{
    if (value < 0)
        copy.null();
    else if constexpr (sizeof(T) == 4)
        copy.int32(value);
    else
        copy.int64(value);
}

void writeRow(CopyIn& copy, std::int64_t traceId, std::int32_t seq, const trace::TraceJob& job)
{
    copy.beginRow(traceJobColumns);
    copy.int64(traceId);
    copy.int32(seq);
    copy.int64(job.jobId);
    copy.text(job.name);
    copy.text(job.user);
    copy.timestamp(job.submit);
    job.start ? copy.timestamp(*job.start) : copy.null();
    job.end ? copy.timestamp(*job.end) : copy.null();
    optionalInt(copy, job.timeLimit);
    copy.int32(job.nodes);
    optionalInt(copy, job.priority);
    optionalInt(copy, job.exitCode);
    job.state.empty() ? copy.null() : copy.text(job.state);
    optionalInt(copy, job.requestedProcs);
    optionalInt(copy, job.requestedTime);
    optionalInt(copy, job.runTime);
    optionalInt(copy, job.wait);
}

nlohmann::json rejectionsJson(const trace::TraceSummary& summary)
{
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [reason, rejection] : summary.rejected)
        out[reason] = { { "count", rejection.count }, { "first_line", rejection.firstLine } };
    return out;
}

} // namespace

ImportResult importTrace(
    Connection& connection, const std::filesystem::path& path, const ImportOptions& options)
{
    ImportResult result;
    result.name = options.name.empty() ? path.filename().string() : options.name;
    // Reading starts before the database is touched: a file of unknown layout fails here.
    auto reader = trace::openTrace(path, options.format);

    Transaction transaction(connection);
    connection.exec(liftStatementTimeout);
    if (options.replace)
        connection.exec(deleteTraceByName, Params(result.name));
    try {
        const Result inserted = connection.exec(insertTrace,
            Params(result.name, trace::formatName(reader->summary().format), std::filesystem::absolute(path).string()));
        result.traceId = inserted.int64(0, inserted.column("id"));
    } catch (const DbError& error) {
        if (error.sqlState() == "23505")
            throw DbError(
                "a trace named '" + result.name + "' exists already (use --replace)", error.sqlState());
        throw;
    }
    {
        CopyIn copy(connection, copyTraceJobs);
        trace::TraceJob job;
        std::int32_t seq = 0;
        while (reader->next(job))
            writeRow(copy, result.traceId, ++seq, job);
        result.rowsStored = copy.finish();
    }
    result.summary = reader->summary();
    const auto& summary = result.summary;
    if (summary.accepted == 0)
        throw trace::TraceError(path.string() + ": no usable jobs\n" + summary.toString());
    if (static_cast<double>(summary.rejectedTotal())
        > options.maxRejectedFraction * static_cast<double>(summary.rowsRead))
        throw trace::TraceError(path.string() + ": too many rejected rows ("
            + std::to_string(summary.rejectedTotal()) + " of " + std::to_string(summary.rowsRead)
            + "); nothing imported\n" + summary.toString());
    connection.exec(
        finishTrace, Params(result.traceId, summary.rowsRead, summary.accepted, rejectionsJson(summary)));
    transaction.commit();
    return result;
}

std::vector<TraceInfo> listTraces(Connection& connection)
{
    const Result result = connection.exec(selectTraces);
    const int id = result.column("id"), name = result.column("name"), format = result.column("format"),
              source = result.column("source"), imported = result.column("imported"),
              read = result.column("rows_read"), accepted = result.column("rows_accepted");
    return result.all([&](const Result& r, int row) {
        return TraceInfo { r.int64(row, id), std::string(r.text(row, name)), std::string(r.text(row, format)),
            std::string(r.text(row, source)), std::string(r.text(row, imported)), r.int64(row, read),
            r.int64(row, accepted) };
    });
}

TraceStats traceStats(Connection& connection, std::string_view name)
{
    auto id = connection.exec(selectTraceId, Params(name));
    if (id.rows() == 0)
        throw DbError("no trace named '" + std::string(name) + "'");
    const std::int64_t traceId = id.int64(0, id.column("id"));
    TraceStats stats;
    stats.name = name;
    const Result r = connection.exec(selectTraceStats, Params(traceId));
    stats.jobs = r.int64(0, r.column("jobs"));
    stats.started = r.int64(0, r.column("started"));
    stats.firstSubmit = r.optInt64(0, r.column("first_submit"));
    stats.lastEvent = r.optInt64(0, r.column("last_event"));
    stats.waitP50 = r.optReal(0, r.column("wait_p50"));
    stats.waitP90 = r.optReal(0, r.column("wait_p90"));
    stats.waitP99 = r.optReal(0, r.column("wait_p99"));
    stats.waitMean = r.optReal(0, r.column("wait_mean"));
    stats.nodeSeconds = r.real(0, r.column("node_seconds"));
    const Result mix = connection.exec(selectNodeMix, Params(traceId));
    const int nodes = mix.column("nodes"), jobs = mix.column("jobs");
    for (int row = 0; row < mix.rows(); ++row)
        stats.nodeMix.emplace_back(static_cast<std::int32_t>(mix.int64(row, nodes)), mix.int64(row, jobs));
    return stats;
}

} // namespace baton::db
