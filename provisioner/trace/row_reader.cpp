#include "readers.hpp"

#include "fields.hpp"

namespace baton::trace {

namespace {

bool isTime(std::int64_t epoch)
{
    return epoch >= 0 && epoch <= maxEpochSeconds;
}

// What every reader's accepted job must satisfy before it is handed on (and stored): times within
// 1970..9999, durations that fit them, text that is valid UTF-8 without control characters. A reader
// that lets a wild value through rejects its row here, with a reason, instead of aborting an import.
const char* checkJob(const TraceJob& job)
{
    if (!isTime(job.submit) || (job.start && !isTime(*job.start)) || (job.end && !isTime(*job.end)))
        return "time out of range";
    for (std::int64_t duration : { job.timeLimit, job.requestedTime, job.runTime, job.wait })
        if (duration > maxDurationSeconds)
            return "duration out of range";
    if (!isValidUtf8(job.name))
        return "invalid characters in name";
    if (!isValidUtf8(job.user))
        return "invalid characters in user";
    if (!isValidUtf8(job.state))
        return "invalid characters in state";
    return nullptr;
}

} // namespace

RowReader::RowReader(const std::filesystem::path& path, TraceFormat format, const char* noRowsError)
    : source_(path)
    , path_(path)
    , noRowsError_(noRowsError)
{
    summary_.format = format;
}

bool RowReader::next(TraceJob& job)
{
    while (nextRow()) {
        ++summary_.rowsRead;
        const char* reason = rowToJob(job);
        if (!reason)
            reason = checkJob(job);
        if (reason) {
            rejectRow(reason);
            continue;
        }
        ++summary_.accepted;
        return true;
    }
    if (summary_.rowsRead == 0)
        throw TraceError(path_.string() + noRowsError_);
    return false;
}

void RowReader::rejectRow(const char* reason)
{
    summary_.reject(reason, summary_.rowsRead);
}

} // namespace baton::trace
