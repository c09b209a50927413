#include "readers.hpp"

#include "fields.hpp"

namespace baton::trace {

SacctParsableReader::SacctParsableReader(const std::filesystem::path& path)
    : LineReader(path, TraceFormat::SacctParsable)
{
    std::string_view line;
    if (!nextNonBlank(line))
        throw TraceError(path.string() + " is empty");
    std::vector<std::string_view> names;
    splitOn(line, '|', names);
    // --parsable (not --parsable2) ends every line with a separator.
    trailingSeparator_ = names.size() > 1 && names.back().empty();
    if (trailingSeparator_)
        names.pop_back();
    layout_.emplace(names);
}

bool SacctParsableReader::next(TraceJob& job)
{
    std::string_view line;
    while (source_.nextLine(line)) {
        if (trim(line).empty())
            continue;
        ++summary_.rowsRead;
        if (trailingSeparator_ && line.ends_with('|'))
            line.remove_suffix(1);
        splitOn(line, '|', fields_);
        if (const char* reason = layout_->toJob(fields_, job)) {
            rejectRow(reason);
            continue;
        }
        ++summary_.accepted;
        return true;
    }
    if (summary_.rowsRead == 0)
        throw TraceError(path_.string() + " has a sacct header but no job rows");
    return false;
}

} // namespace baton::trace
