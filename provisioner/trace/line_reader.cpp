#include "readers.hpp"

#include "fields.hpp"

namespace baton::trace {

LineReader::LineReader(const std::filesystem::path& path, TraceFormat format, const char* noRowsError)
    : RowReader(path, format, noRowsError)
{ }

bool LineReader::nextRow()
{
    return nextNonBlank(row_);
}

void LineReader::rejectRow(const char* reason)
{
    if (source_.lastLineUnterminated())
        throw TraceError(path_.string() + " is truncated: its last line ("
            + std::to_string(source_.lineNumber()) + ") is incomplete (" + reason + ")");
    summary_.reject(reason, source_.lineNumber());
}

bool LineReader::nextNonBlank(std::string_view& line)
{
    while (source_.nextLine(line))
        if (!trim(line).empty())
            return true;
    return false;
}

} // namespace baton::trace
