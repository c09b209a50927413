#include "readers.hpp"

#include "fields.hpp"

#include <algorithm>
#include <cctype>

namespace baton::trace {

namespace {

using Column = EagleCsvReader::Column;

constexpr std::pair<std::string_view, Column> columnNames[] = {
    { "job_id", Column::JobId },
    { "user", Column::User },
    { "partition", Column::Partition },
    { "wallclock_req", Column::WallclockReq },
    { "nodes_req", Column::NodesReq },
    { "processors_req", Column::ProcessorsReq },
    { "gpus_req", Column::GpusReq },
    { "submit_time", Column::SubmitTime },
    { "start_time", Column::StartTime },
    { "end_time", Column::EndTime },
    { "run_time", Column::RunTime },
    { "state", Column::State },
    { "name", Column::Name },
};

// Without these a row cannot be replayed: its id, when it was submitted, started and ended, its size
// and its time limit.
constexpr std::pair<Column, std::string_view> requiredColumns[] = {
    { Column::JobId, "job_id" },
    { Column::SubmitTime, "submit_time" },
    { Column::StartTime, "start_time" },
    { Column::EndTime, "end_time" },
    { Column::NodesReq, "nodes_req" },
    { Column::WallclockReq, "wallclock_req" },
};

std::string lowered(std::string_view text)
{
    std::string out(trim(text));
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

// pandas writes a missing time as NaT (and an empty field when the CSV comes from elsewhere).
bool isUnsetCsvTime(std::string_view text)
{
    return isUnsetTime(text) || trim(text) == "NaT";
}

// "532209"; an array task written as "532209_7" counts as its array's job, as the sample records
// array tasks under the array's id.
std::optional<std::int64_t> parseJobId(std::string_view text)
{
    text = trim(text);
    if (auto underscore = text.find('_'); underscore != std::string_view::npos)
        text = text.substr(0, underscore);
    auto id = parseInteger(text);
    if (!id || *id < 0)
        return std::nullopt;
    return id;
}

// What the job asked for: its time limit, nodes, processors and GPUs. Returns nullptr, or why the
// row is rejected.
const char* readRequest(Column column, std::string_view field, TraceJob& job)
{
    switch (column) {
    case Column::WallclockReq: {
        if (trim(field).empty())
            break; // no limit recorded
        auto limit = parseDecimalSeconds(field);
        if (!limit)
            return "bad time limit";
        job.timeLimit = *limit;
        break;
    }
    case Column::NodesReq: {
        auto nodes = parseWholeCount(field);
        if (!nodes || *nodes < 1 || *nodes > 1'000'000)
            return "bad node count";
        job.nodes = static_cast<std::int32_t>(*nodes);
        break;
    }
    case Column::ProcessorsReq: {
        if (trim(field).empty())
            break;
        auto cpus = parseWholeCount(field);
        if (!cpus || *cpus > 100'000'000)
            return "bad cpu count";
        job.cpus = static_cast<std::int32_t>(*cpus);
        job.requestedProcs = job.cpus;
        break;
    }
    case Column::GpusReq: {
        if (trim(field).empty())
            break;
        auto gpus = parseWholeCount(field);
        if (!gpus || *gpus > 1'000'000)
            return "bad gpu count";
        job.gpus = static_cast<std::int32_t>(*gpus);
        break;
    }
    default:
        break;
    }
    return nullptr;
}

} // namespace

bool looksLikeEagleHeader(std::string_view line)
{
    if (line.find(',') == std::string_view::npos)
        return false;
    std::vector<std::string_view> names;
    std::string scratch;
    if (!splitCsv(line, names, scratch))
        return false;
    bool id = false, submit = false, start = false;
    for (auto name : names) {
        const auto lower = lowered(name);
        id = id || lower == "job_id";
        submit = submit || lower == "submit_time";
        start = start || lower == "start_time";
    }
    return id && submit && start;
}

EagleCsvReader::EagleCsvReader(const std::filesystem::path& path)
    : LineReader(path, TraceFormat::EagleCsv, " has an Eagle CSV header but no job rows")
{
    std::string_view line;
    if (!nextNonBlank(line))
        throw TraceError(path.string() + " is empty");
    std::vector<std::string_view> names;
    if (!splitCsv(line, names, unquoted_))
        throw TraceError(path.string() + ": the CSV header line has unbalanced quotes");
    for (auto name : names) {
        const auto lower = lowered(name);
        Column column = Column::Ignored; // account, qos, mem_req, work_dir, submit_line, an index, ...
        for (auto [known, value] : columnNames)
            if (lower == known)
                column = value;
        if (column != Column::Ignored && std::find(columns_.begin(), columns_.end(), column) != columns_.end())
            throw TraceError(path.string() + ": column " + lower + " appears twice in the CSV header");
        columns_.push_back(column);
    }
    for (auto [column, name] : requiredColumns)
        if (std::find(columns_.begin(), columns_.end(), column) == columns_.end())
            throw TraceError(path.string() + ": the Eagle CSV header has no " + std::string(name) + " column");
}

bool EagleCsvReader::nextRow()
{
    if (!nextNonBlank(row_))
        return false;
    if (!endsInQuote(row_))
        return true;
    // A quoted field holds a line break: the row goes on until its quotes balance. A quote that is
    // never closed would swallow the rest of the file into one rejected row, so it is an error.
    const auto firstLine = source_.lineNumber();
    joined_.assign(row_);
    bool open = true;
    std::string_view more;
    while (open) {
        if (!source_.nextLine(more))
            throw TraceError(path_.string() + ": line " + std::to_string(firstLine)
                + " opens a quoted field that is never closed");
        if (joined_.size() + 1 + more.size() > ByteSource::maxLineBytes)
            throw TraceError(path_.string() + ": the row from line " + std::to_string(firstLine)
                + " is longer than 1 MiB (a quoted field that is never closed?)");
        joined_ += '\n';
        joined_.append(more);
        open = open != endsInQuote(more);
    }
    row_ = joined_;
    return true;
}

const char* EagleCsvReader::rowToJob(TraceJob& job)
{
    if (!splitCsv(row_, fields_, unquoted_))
        return "bad quoting";
    if (fields_.size() != columns_.size())
        return "wrong field count";
    job = TraceJob {};
    std::string_view startText, endText;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
        const std::string_view field = fields_[i];
        switch (columns_[i]) {
        case Column::Ignored:
            break;
        case Column::JobId: {
            auto id = parseJobId(field);
            if (!id)
                return "bad job id";
            job.jobId = *id;
            break;
        }
        case Column::User:
            job.user = trim(field);
            break;
        case Column::Partition:
            if (!isValidUtf8(field))
                return "invalid characters in partition";
            job.partition = trim(field);
            break;
        case Column::Name:
            // A quoted name may hold line breaks; the readers pass on no control characters, and the
            // name is only a label, so they become spaces rather than cost the job.
            job.name = field;
            std::replace_if(
                job.name.begin(), job.name.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; },
                ' ');
            break;
        case Column::State:
            job.state = trim(field).substr(0, trim(field).find(' ')); // "CANCELLED by 123"
            break;
        case Column::WallclockReq:
        case Column::NodesReq:
        case Column::ProcessorsReq:
        case Column::GpusReq:
            if (const char* error = readRequest(columns_[i], field, job))
                return error;
            break;
        case Column::SubmitTime: {
            auto submit = parseTimestamp(field);
            if (!submit)
                return "bad submit time";
            job.submit = *submit;
            break;
        }
        case Column::StartTime:
            startText = field;
            break;
        case Column::EndTime:
            endText = field;
            break;
        case Column::RunTime:
            break; // end − start says the same, to the second
        }
    }
    if (isUnsetCsvTime(startText))
        return "never started";
    auto start = parseTimestamp(startText);
    if (!start)
        return "bad start time";
    std::optional<std::int64_t> end;
    if (!isUnsetCsvTime(endText) && !(end = parseTimestamp(endText)))
        return "bad end time";
    return job.setRunTimes(*start, end);
}

} // namespace baton::trace
