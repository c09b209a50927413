// The concrete readers behind openTrace(); internal to the trace library.
#pragma once

#include "byte_source.hpp"
#include "sacct_layout.hpp"
#include "trace_reader.hpp"

#include <optional>
#include <string>
#include <vector>

namespace baton::trace {

// Shared by the line-based readers: a row that cannot be used is counted and skipped, except a bad
// last line without its newline, which means the file was cut off.
class LineReader : public TraceReader {
protected:
    explicit LineReader(const std::filesystem::path& path, TraceFormat format);
    // Records a rejected row, or throws if it is the cut-off end of the file.
    void rejectRow(const char* reason);
    // The next line that is not blank; false at the end of the file.
    bool nextNonBlank(std::string_view& line);

    ByteSource source_;
    std::filesystem::path path_;
    std::vector<std::string_view> fields_;
};

// `sacct` default (fixed-width) output: an optional job-count line, a header, a dashed separator,
// then rows separated by tabs, by runs of spaces, or aligned to the separator's column widths.
class SacctTextReader final : public LineReader {
public:
    explicit SacctTextReader(const std::filesystem::path& path);
    bool next(TraceJob& job) override;

private:
    bool splitRow(std::string_view line);

    std::optional<SacctLayout> layout_;
    std::vector<std::pair<std::size_t, std::size_t>> widths_; // offset, length from the dashed line
};

// `sacct --parsable2` (and --parsable): a '|'-separated header, then '|'-separated rows.
class SacctParsableReader final : public LineReader {
public:
    explicit SacctParsableReader(const std::filesystem::path& path);
    bool next(TraceJob& job) override;

private:
    std::optional<SacctLayout> layout_;
    bool trailingSeparator_ = false;
};

// Standard Workload Format: ';' comments (UnixStartTime gives the epoch of time 0), then 18
// whitespace-separated numeric fields per job, -1 for unknown.
class SwfReader final : public LineReader {
public:
    explicit SwfReader(const std::filesystem::path& path);
    bool next(TraceJob& job) override;

private:
    const char* toJob(TraceJob& job);
    std::int64_t unixStartTime_ = 0;
};

// `sacct --json`: streams the top-level "jobs" array one job object at a time.
class SacctJsonReader final : public TraceReader {
public:
    explicit SacctJsonReader(const std::filesystem::path& path);
    bool next(TraceJob& job) override;

private:
    int skipSpace();
    int expectByte();
    void readString(std::string& out);
    void skipValue(int first);
    void captureObject(std::string& out);
    [[noreturn]] void fail(const std::string& what);

    ByteSource source_;
    std::filesystem::path path_;
    bool inJobs_ = false;
    bool done_ = false;
    std::string object_;
    std::string key_;
};

} // namespace baton::trace
