#include "readers.hpp"

namespace baton::trace {

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
        if (const char* reason = rowToJob(job)) {
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
