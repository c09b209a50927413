#include "trace_reader.hpp"

#include "byte_source.hpp"
#include "fields.hpp"
#include "readers.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace baton::trace {

namespace {

constexpr std::pair<TraceFormat, std::string_view> formatNames[] = {
    { TraceFormat::Auto, "auto" },
    { TraceFormat::Sacct, "sacct" },
    { TraceFormat::SacctText, "sacct-text" },
    { TraceFormat::SacctParsable, "sacct-parsable" },
    { TraceFormat::SacctJson, "sacct-json" },
    { TraceFormat::Swf, "swf" },
    { TraceFormat::EagleCsv, "eagle-csv" },
};

bool containsJobIdHeader(std::string_view line)
{
    std::string lower(line);
    std::transform(
        lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    return lower.find("jobid") != std::string::npos;
}

bool looksLikeSwfRow(std::string_view line)
{
    std::vector<std::string_view> fields;
    splitWhitespace(line, fields);
    if (fields.size() != 18)
        return false;
    return std::all_of(fields.begin(), fields.end(), [](std::string_view field) {
        return field.find_first_not_of("0123456789.-") == std::string_view::npos;
    });
}

TraceFormat detectFromContent(const std::filesystem::path& path)
{
    ByteSource source(path);
    std::string_view line;
    bool sawCount = false;
    while (source.nextLine(line)) {
        const std::string_view text = trim(line);
        if (text.empty())
            continue;
        if (text.front() == '{' || text.front() == '[')
            return TraceFormat::SacctJson;
        if (text.front() == ';')
            return TraceFormat::Swf;
        if (looksLikeEagleHeader(text))
            return TraceFormat::EagleCsv;
        if (containsJobIdHeader(text))
            return text.find('|') != std::string_view::npos ? TraceFormat::SacctParsable
                                                            : TraceFormat::SacctText;
        if (looksLikeSwfRow(text))
            return TraceFormat::Swf;
        if (!sawCount && parseInteger(text)) { // sacct's leading job-count line
            sawCount = true;
            continue;
        }
        throw TraceError(path.string() + ": unknown trace layout (line " + std::to_string(source.lineNumber())
            + " is neither a sacct header, sacct JSON, an SWF row nor an Eagle CSV header)");
    }
    throw TraceError(path.string() + " is empty");
}

bool isSacct(TraceFormat format)
{
    return format == TraceFormat::SacctText || format == TraceFormat::SacctParsable
        || format == TraceFormat::SacctJson;
}

} // namespace

std::optional<TraceFormat> parseFormat(std::string_view text)
{
    for (auto [format, name] : formatNames)
        if (text == name)
            return format;
    return std::nullopt;
}

std::string_view formatName(TraceFormat format)
{
    for (auto [candidate, name] : formatNames)
        if (candidate == format)
            return name;
    return "unknown";
}

std::uint64_t TraceSummary::rejectedTotal() const
{
    std::uint64_t total = 0;
    for (const auto& [reason, rejection] : rejected)
        total += rejection.count;
    return total;
}

void TraceSummary::reject(const std::string& reason, std::uint64_t line)
{
    auto& rejection = rejected[reason];
    if (rejection.count++ == 0)
        rejection.firstLine = line;
}

std::string TraceSummary::toString() const
{
    std::ostringstream out;
    out << "format " << formatName(format) << ": rows read " << rowsRead << ", accepted " << accepted
        << ", rejected " << rejectedTotal() << "\n";
    const char* unit = format == TraceFormat::SacctJson ? "job" : "line";
    for (const auto& [reason, rejection] : rejected)
        out << "  rejected " << rejection.count << " (" << reason << "), first at " << unit << " "
            << rejection.firstLine << "\n";
    return out.str();
}

TraceFormat detectFormat(const std::filesystem::path& path, TraceFormat hint)
{
    if (hint != TraceFormat::Auto && hint != TraceFormat::Sacct)
        return hint;
    const TraceFormat found = detectFromContent(path);
    if (hint == TraceFormat::Sacct && !isSacct(found))
        throw TraceError(
            path.string() + " is not sacct output (it looks like " + std::string(formatName(found)) + ")");
    return found;
}

std::unique_ptr<TraceReader> openTrace(const std::filesystem::path& path, TraceFormat format)
{
    switch (detectFormat(path, format)) {
    case TraceFormat::SacctText:
        return std::make_unique<SacctTextReader>(path);
    case TraceFormat::SacctParsable:
        return std::make_unique<SacctParsableReader>(path);
    case TraceFormat::SacctJson:
        return std::make_unique<SacctJsonReader>(path);
    case TraceFormat::Swf:
        return std::make_unique<SwfReader>(path);
    case TraceFormat::EagleCsv:
        return std::make_unique<EagleCsvReader>(path);
    case TraceFormat::Auto:
    case TraceFormat::Sacct:
        break;
    }
    throw TraceError("no reader for " + path.string());
}

std::vector<TraceJob> readAll(const std::filesystem::path& path, TraceFormat format, TraceSummary* summary)
{
    auto reader = openTrace(path, format);
    std::vector<TraceJob> jobs;
    TraceJob job;
    while (reader->next(job))
        jobs.push_back(std::move(job));
    if (summary)
        *summary = reader->summary();
    return jobs;
}

} // namespace baton::trace
