#include "readers.hpp"

#include "fields.hpp"

namespace baton::trace {

SacctParsableReader::SacctParsableReader(const std::filesystem::path& path)
    : LineReader(path, TraceFormat::SacctParsable, " has a sacct header but no job rows")
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

const char* SacctParsableReader::rowToJob(TraceJob& job)
{
    std::string_view line = row_;
    if (trailingSeparator_ && line.ends_with('|'))
        line.remove_suffix(1);
    splitOn(line, '|', fields_);
    return layout_->toJob(fields_, job);
}

} // namespace baton::trace
