#include "sacct_layout.hpp"

#include "fields.hpp"
#include "trace_reader.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

namespace baton::trace {

namespace {

using Column = SacctLayout::Column;

struct Known {
    const char* name; // lower case
    Column column;
};

constexpr Known knownColumns[] = {
    { "jobid", Column::JobId },
    { "jobidraw", Column::JobIdRaw },
    { "jobname", Column::JobName },
    { "uid", Column::Uid },
    { "user", Column::User },
    { "submit", Column::Submit },
    { "start", Column::Start },
    { "end", Column::End },
    { "priority", Column::Priority },
    { "timelimitraw", Column::TimelimitRaw },
    { "timelimit", Column::Timelimit },
    { "exitcode", Column::ExitCode },
    { "state", Column::State },
    { "nnodes", Column::NNodes },
    { "allocnodes", Column::AllocNodes },
    { "reqnodes", Column::ReqNodes },
    { "reqcpus", Column::ReqCpus },
    { "alloccpus", Column::AllocCpus },
    { "ncpus", Column::AllocCpus },
    { "alloctres", Column::AllocTres },
    { "reqtres", Column::ReqTres },
    { "partition", Column::Partition },
    { "elapsed", Column::Elapsed },
};

std::string lower(std::string_view text)
{
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

Column lookup(std::string_view header)
{
    const std::string name = lower(trim(header));
    if (name.empty())
        return Column::Ignored;
    for (const auto& known : knownColumns)
        if (name == known.name)
            return known.column;
    // A cut header (fixed-width output) matches the one known column it starts.
    const Known* match = nullptr;
    for (const auto& known : knownColumns) {
        if (std::string_view(known.name).starts_with(name)) {
            if (match)
                return Column::Ignored;
            match = &known;
        }
    }
    return match && name.size() >= 4 ? match->column : Column::Ignored;
}

// The counts a TRES list ("billing=8,cpu=8,gres/gpu=2,mem=64G,node=1") gives: cpu= and the GPUs.
// A typed GPU entry ("gres/gpu:a100=2") counts when the list has no untyped one (Slurm lists both
// when GPUs have types). A list without GPU entries means no GPUs. False when an entry is malformed.
struct TresCounts {
    std::optional<std::int64_t> cpus;
    std::int64_t gpus = 0;
};

bool parseTres(std::string_view text, TresCounts& out)
{
    std::optional<std::int64_t> untyped;
    std::int64_t typed = 0;
    while (!text.empty()) {
        const auto comma = text.find(',');
        const auto entry = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
        const auto eq = entry.find('=');
        if (eq == std::string_view::npos)
            return false;
        const auto key = entry.substr(0, eq);
        if (key != "cpu" && key != "gres/gpu" && !key.starts_with("gres/gpu:"))
            continue; // mem=64G, billing=..., licences: not counted here
        auto count = parseInteger(entry.substr(eq + 1));
        if (!count || *count < 0 || *count > 100'000'000)
            return false;
        if (key == "cpu")
            out.cpus = *count;
        else if (key == "gres/gpu")
            untyped = *count;
        else
            typed += *count;
    }
    out.gpus = untyped ? *untyped : typed;
    return true;
}

bool has(const std::vector<Column>& columns, Column column)
{
    return std::find(columns.begin(), columns.end(), column) != columns.end();
}

} // namespace

SacctLayout::SacctLayout(const std::vector<std::string_view>& names)
{
    for (auto name : names)
        columns_.push_back(lookup(name));
    if (!has(columns_, Column::JobId) && !has(columns_, Column::JobIdRaw))
        throw TraceError("the sacct header has no JobID column");
    for (auto [column, label] :
        { std::pair { Column::Submit, "Submit" }, { Column::Start, "Start" }, { Column::End, "End" } })
        if (!has(columns_, column))
            throw TraceError(std::string("the sacct header has no ") + label + " column");
    if (!has(columns_, Column::NNodes) && !has(columns_, Column::AllocNodes)
        && !has(columns_, Column::ReqNodes))
        throw TraceError("the sacct header has no NNodes column");
}

namespace {

// What a row says beyond a single field: the last choices are made once all fields are read.
struct RowState {
    bool haveRawId = false;
    std::string_view startText, endText;
    // Processors and GPUs, best source first: AllocCPUS, then the allocated TRES, then the requested.
    std::optional<std::int64_t> allocCpus;
    std::optional<TresCounts> allocTres, reqTres;
};

// Each reader below takes the columns of one kind and leaves the others alone; it returns nullptr, or
// why the row is rejected.

// Who the job is: its id, name, owner, partition and final state.
const char* readIdentity(Column column, std::string_view field, TraceJob& job, RowState& row)
{
    switch (column) {
    case Column::JobIdRaw:
    case Column::JobId: {
        if (column == Column::JobId && row.haveRawId)
            break;
        if (field.find('.') != std::string_view::npos)
            return "job step";
        auto id = parseInteger(field);
        if (!id || *id < 0)
            return "bad job id";
        job.jobId = *id;
        row.haveRawId = column == Column::JobIdRaw;
        break;
    }
    case Column::JobName:
        if (!isValidUtf8(field))
            return "invalid characters in name";
        job.name = field;
        break;
    case Column::Uid:
    case Column::User:
        if (!isValidUtf8(field))
            return "invalid characters in user";
        if (job.user.empty() || column == Column::Uid)
            job.user = field;
        break;
    case Column::Partition:
        if (!isValidUtf8(field))
            return "invalid characters in partition";
        job.partition = field;
        break;
    case Column::State:
        job.state = field.substr(0, field.find(' ')); // "CANCELLED by 123"
        break;
    default:
        break;
    }
    return nullptr;
}

// When it ran and how it ended: times, priority, time limit, exit code.
const char* readTimes(Column column, std::string_view field, TraceJob& job, RowState& row)
{
    switch (column) {
    case Column::Submit: {
        auto submit = parseTimestamp(field);
        if (!submit)
            return "bad submit time";
        job.submit = *submit;
        break;
    }
    case Column::Start:
        row.startText = field;
        break;
    case Column::End:
        row.endText = field;
        break;
    case Column::Priority: {
        auto priority = parseInteger(field);
        if (!priority)
            return "bad priority";
        job.priority = *priority;
        break;
    }
    case Column::TimelimitRaw:
    case Column::Timelimit: {
        if (field == "UNLIMITED" || field == "Partition_Limit" || field.empty())
            break;
        std::optional<std::int64_t> limit;
        if (column == Column::Timelimit)
            limit = parseSlurmDuration(field);
        else if (auto minutes = parseInteger(field))
            limit = checkedMultiply(*minutes, 60); // checked: a huge TimelimitRaw must not wrap

        if (!limit || *limit < 0)
            return "bad time limit";
        job.timeLimit = *limit;
        break;
    }
    case Column::ExitCode: {
        auto code64 = parseInteger(field.substr(0, field.find(':')));
        auto code = code64 ? toInt32(*code64) : std::nullopt;
        if (!code)
            return "bad exit code";
        job.exitCode = *code;
        break;
    }
    default:
        break;
    }
    return nullptr;
}

// What it held: nodes, processors, TRES.
const char* readResources(Column column, std::string_view field, TraceJob& job, RowState& row)
{
    switch (column) {
    case Column::NNodes:
    case Column::AllocNodes:
    case Column::ReqNodes: {
        auto nodes = parseInteger(field);
        if (!nodes || *nodes < 1 || *nodes > 1'000'000)
            return "bad node count";
        if (job.nodes == 0 || column != Column::ReqNodes)
            job.nodes = static_cast<std::int32_t>(*nodes);
        break;
    }
    case Column::ReqCpus: {
        auto cpus64 = parseInteger(field);
        auto cpus = cpus64 ? toInt32(*cpus64) : std::nullopt;
        if (!cpus || *cpus < 0)
            return "bad cpu count";
        job.requestedProcs = *cpus;
        break;
    }
    case Column::AllocCpus: {
        auto cpus = parseInteger(field);
        if (!cpus || *cpus < 0 || *cpus > 100'000'000)
            return "bad cpu count";
        row.allocCpus = *cpus;
        break;
    }
    case Column::AllocTres:
    case Column::ReqTres: {
        if (field.empty())
            break; // a job that never ran has no allocated TRES
        TresCounts counts;
        if (!parseTres(field, counts))
            return "bad TRES list";
        (column == Column::AllocTres ? row.allocTres : row.reqTres) = counts;
        break;
    }
    default:
        break;
    }
    return nullptr;
}

// Processors and GPUs from the best source the row has; then the run times.
const char* finishRow(TraceJob& job, const RowState& row)
{
    if (row.allocCpus && *row.allocCpus > 0)
        job.cpus = static_cast<std::int32_t>(*row.allocCpus);
    else if (row.allocTres && row.allocTres->cpus)
        job.cpus = static_cast<std::int32_t>(*row.allocTres->cpus);
    else if (row.reqTres && row.reqTres->cpus)
        job.cpus = static_cast<std::int32_t>(*row.reqTres->cpus);
    else if (job.requestedProcs > 0)
        job.cpus = job.requestedProcs;
    if (row.allocTres)
        job.gpus = static_cast<std::int32_t>(row.allocTres->gpus);
    else if (row.reqTres)
        job.gpus = static_cast<std::int32_t>(row.reqTres->gpus);
    if (isUnsetTime(row.startText))
        return "never started";
    auto start = parseTimestamp(row.startText);
    if (!start)
        return "bad start time";
    std::optional<std::int64_t> end;
    if (!isUnsetTime(row.endText) && !(end = parseTimestamp(row.endText)))
        return "bad end time";
    return job.setRunTimes(*start, end);
}

} // namespace

const char* SacctLayout::toJob(const std::vector<std::string_view>& fields, TraceJob& job) const
{
    if (fields.size() != columns_.size())
        return "wrong field count";
    job = TraceJob {};
    RowState row;
    for (std::size_t i = 0; i < fields.size(); ++i) {
        const std::string_view field = trim(fields[i]);
        for (auto read : { readIdentity, readTimes, readResources })
            if (const char* error = read(columns_[i], field, job, row))
                return error;
    }
    return finishRow(job, row);
}

} // namespace baton::trace
