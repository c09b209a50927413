#include "readers.hpp"

#include "fields.hpp"

namespace baton::trace {

namespace {

bool isDashLine(std::string_view line)
{
    return line.find('-') != std::string_view::npos
        && line.find_first_not_of("- \t") == std::string_view::npos;
}

} // namespace

SacctTextReader::SacctTextReader(const std::filesystem::path& path)
    : LineReader(path, TraceFormat::SacctText, " has a sacct header but no job rows")
{
    std::string_view line;
    // An optional leading job-count line, then the header.
    if (!nextNonBlank(line))
        throw TraceError(path.string() + " is empty");
    if (parseInteger(line) && !nextNonBlank(line))
        throw TraceError(path.string() + " has a job count but no sacct header");
    std::vector<std::string_view> names;
    splitWhitespace(line, names);
    layout_.emplace(names); // throws if this is not a sacct header
    if (!source_.nextLine(line) || !isDashLine(line))
        throw TraceError(path.string() + ": the sacct header is not followed by its dashed separator line");
    // Column extents from the dashed line, for rows aligned to them.
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && line[i] != '-')
            ++i;
        const std::size_t begin = i;
        while (i < line.size() && line[i] == '-')
            ++i;
        if (i > begin)
            widths_.emplace_back(begin, i - begin);
    }
}

void SacctTextReader::splitRow(std::string_view line)
{
    if (line.find('\t') != std::string_view::npos) {
        splitOn(line, '\t', fields_);
        return;
    }
    splitWhitespace(line, fields_);
    if (fields_.size() == layout_->columnCount() || widths_.size() != layout_->columnCount())
        return;
    // Aligned columns, where a field may hold spaces (a job name) or be empty.
    fields_.clear();
    for (auto [offset, length] : widths_)
        fields_.push_back(offset < line.size() ? line.substr(offset, length) : std::string_view {});
}

const char* SacctTextReader::rowToJob(TraceJob& job)
{
    splitRow(row_);
    return layout_->toJob(fields_, job);
}

} // namespace baton::trace
