#include "readers.hpp"

#include "fields.hpp"

namespace baton::trace {

namespace {

// SWF field numbers (1-based, as the format's documentation counts them).
enum SwfField : std::size_t {
    JobNumber = 1,
    SubmitTime,
    WaitTime,
    RunTime,
    AllocatedProcs,
    AverageCpu,
    UsedMemory,
    RequestedProcs,
    RequestedTime,
    RequestedMemory,
    Status,
    UserId,
    GroupId,
    Executable,
    Queue,
    Partition,
    Preceding,
    ThinkTime,
};
constexpr std::size_t swfFieldCount = 18;

const char* statusName(std::int64_t status)
{
    switch (status) {
    case 0:
        return "FAILED";
    case 1:
        return "COMPLETED";
    case 2:
    case 3:
    case 4:
        return "PARTIAL";
    case 5:
        return "CANCELLED";
    default:
        return "";
    }
}

} // namespace

SwfReader::SwfReader(const std::filesystem::path& path)
    : LineReader(path, TraceFormat::Swf, " holds no SWF job lines")
{ }

bool SwfReader::nextRow()
{
    while (nextNonBlank(row_)) {
        row_ = trim(row_);
        if (row_.front() != ';')
            return true;
        // "; UnixStartTime: 1234567890" anchors the relative times; MaxNodes and MaxProcs give the
        // machine's size, which the simulator needs to turn processors into nodes.
        auto colon = row_.find(':');
        if (colon == std::string_view::npos)
            continue;
        const auto key = trim(row_.substr(1, colon - 1));
        const auto value = parseInteger(trim(row_.substr(colon + 1)));
        if (!value)
            continue;
        if (key == "UnixStartTime")
            unixStartTime_ = *value;
        else if (key == "MaxNodes" && *value > 0)
            summary_.maxNodes = *value;
        else if (key == "MaxProcs" && *value > 0)
            summary_.maxProcs = *value;
    }
    return false;
}

const char* SwfReader::rowToJob(TraceJob& job)
{
    splitWhitespace(row_, fields_);
    if (fields_.size() != swfFieldCount)
        return "wrong field count";
    std::int64_t value[swfFieldCount + 1] = {};
    for (std::size_t i = 1; i <= swfFieldCount; ++i) {
        if (i == AverageCpu || i == UsedMemory || i == RequestedMemory)
            continue; // may be fractional, and unused here
        auto parsed = parseInteger(fields_[i - 1]);
        if (!parsed)
            return "bad number";
        value[i] = *parsed;
    }
    job = TraceJob {};
    if (value[JobNumber] < 0)
        return "bad job id";
    if (value[SubmitTime] < 0)
        return "bad submit time";
    job.jobId = value[JobNumber];
    // Checked sums: a submit time of 10^13 or a wait near 2^63 rejects the row instead of wrapping.
    auto submit = checkedAdd(unixStartTime_, value[SubmitTime]);
    if (!submit)
        return "time out of range";
    job.submit = *submit;
    job.wait = value[WaitTime];
    job.runTime = value[RunTime];
    if (job.wait >= 0) {
        job.start = checkedAdd(job.submit, job.wait);
        if (!job.start)
            return "time out of range";
        if (job.runTime >= 0) {
            job.end = checkedAdd(*job.start, job.runTime);
            if (!job.end)
                return "time out of range";
        }
    }
    auto requestedProcs = toInt32(value[RequestedProcs]);
    if (!requestedProcs)
        return "bad processor count";
    job.requestedProcs = *requestedProcs;
    const std::int64_t procs = value[AllocatedProcs] > 0 ? value[AllocatedProcs] : value[RequestedProcs];
    if (procs < 1 || procs > 100'000'000)
        return "bad processor count";
    job.nodes = static_cast<std::int32_t>(procs);
    job.cpus = job.nodes;
    if (value[Partition] >= 0)
        job.partition = std::to_string(value[Partition]);
    if (value[Preceding] > 0)
        job.precedingJob = value[Preceding];
    job.requestedTime = value[RequestedTime];
    job.timeLimit = value[RequestedTime] >= 0 ? value[RequestedTime] : -1;
    if (value[UserId] >= 0)
        job.user = std::to_string(value[UserId]);
    job.state = statusName(value[Status]);
    return nullptr;
}

} // namespace baton::trace
