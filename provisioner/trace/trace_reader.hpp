// Streaming readers of job traces: sacct (fixed-width, --parsable2, --json), the Standard Workload
// Format and NREL Eagle's job CSV. Memory use is bounded by the longest row, never by the file's size. Rows that cannot be
// used are counted by reason and skipped; a file that is not a trace at all (binary, truncated,
// empty, unknown layout) raises TraceError.
#pragma once

#include "trace_job.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace baton::trace {

enum class TraceFormat { Auto, Sacct, SacctText, SacctParsable, SacctJson, Swf, EagleCsv };

// "auto", "sacct" (any sacct layout), "sacct-text", "sacct-parsable", "sacct-json", "swf", "eagle-csv"
// (NREL Eagle's job CSV).
std::optional<TraceFormat> parseFormat(std::string_view text);
std::string_view formatName(TraceFormat format);

class TraceError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Rejection {
    std::uint64_t count = 0;
    std::uint64_t firstLine = 0; // 1-based line (or job index for JSON) of the first such row
};

struct TraceSummary {
    TraceFormat format = TraceFormat::Auto;
    std::uint64_t rowsRead = 0; // data rows seen (headers and comments excluded)
    std::uint64_t accepted = 0;
    std::map<std::string, Rejection> rejected; // by reason
    // SWF header "MaxNodes" / "MaxProcs" (the machine's size), when the file gives them.
    std::optional<std::int64_t> maxNodes;
    std::optional<std::int64_t> maxProcs;

    std::uint64_t rejectedTotal() const;
    void reject(const std::string& reason, std::uint64_t line);
    // Several lines: "rows read N, accepted N, rejected N" then one line per reason.
    std::string toString() const;
};

class TraceReader {
public:
    virtual ~TraceReader() = default;
    // Fills `job` with the next accepted job and returns true; false at the end of the trace.
    // Throws TraceError when the file turns out not to be a readable trace.
    virtual bool next(TraceJob& job) = 0;
    const TraceSummary& summary() const { return summary_; }

protected:
    TraceSummary summary_;
};

// Looks at the beginning of the file; throws TraceError if it is empty, binary or of no known layout.
TraceFormat detectFormat(const std::filesystem::path& path, TraceFormat hint = TraceFormat::Auto);

// Opens a reader; Auto and Sacct are resolved with detectFormat().
std::unique_ptr<TraceReader> openTrace(
    const std::filesystem::path& path, TraceFormat format = TraceFormat::Auto);

// Convenience for callers that want every job in memory (the simulator). Fills `summary` if given.
std::vector<TraceJob> readAll(const std::filesystem::path& path, TraceFormat format = TraceFormat::Auto,
    TraceSummary* summary = nullptr);

} // namespace baton::trace
