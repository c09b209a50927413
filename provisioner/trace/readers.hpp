// The concrete readers behind openTrace(); internal to the trace library.
#pragma once

#include "byte_source.hpp"
#include "sacct_layout.hpp"
#include "trace_reader.hpp"

#include <optional>
#include <string>
#include <vector>

namespace baton::trace {

// Shared by every reader: each data row counts as read, then as accepted or as rejected for a
// reason (and skipped); a trace without a single data row is an error. A reader states only how it
// finds its rows and converts one.
class RowReader : public TraceReader {
public:
    bool next(TraceJob& job) final;

protected:
    RowReader(const std::filesystem::path& path, TraceFormat format, const char* noRowsError);
    // Steps to the next data row; false at the end of the trace.
    virtual bool nextRow() = 0;
    // Converts the current row into `job`: nullptr if it is accepted, else why it is rejected.
    virtual const char* rowToJob(TraceJob& job) = 0;
    // Records a rejected row, first seen at its index among the rows.
    virtual void rejectRow(const char* reason);

    ByteSource source_;
    std::filesystem::path path_;

private:
    const char* noRowsError_; // follows the file name
};

// Shared by the line-based readers: a row that cannot be used is counted and skipped, except a bad
// last line without its newline, which means the file was cut off.
class LineReader : public RowReader {
protected:
    LineReader(const std::filesystem::path& path, TraceFormat format, const char* noRowsError);
    // The next line that is not blank.
    bool nextRow() override;
    // Records a rejected row at its line, or throws if it is the cut-off end of the file.
    void rejectRow(const char* reason) override;
    // The next line that is not blank; false at the end of the file.
    bool nextNonBlank(std::string_view& line);

    std::string_view row_; // the current row, valid until the next line is read
    std::vector<std::string_view> fields_;
};

// `sacct` default (fixed-width) output: an optional job-count line, a header, a dashed separator,
// then rows separated by tabs, by runs of spaces, or aligned to the separator's column widths.
class SacctTextReader final : public LineReader {
public:
    explicit SacctTextReader(const std::filesystem::path& path);

private:
    const char* rowToJob(TraceJob& job) override;
    void splitRow(std::string_view line);

    std::optional<SacctLayout> layout_;
    std::vector<std::pair<std::size_t, std::size_t>> widths_; // offset, length from the dashed line
};

// `sacct --parsable2` (and --parsable): a '|'-separated header, then '|'-separated rows.
class SacctParsableReader final : public LineReader {
public:
    explicit SacctParsableReader(const std::filesystem::path& path);

private:
    const char* rowToJob(TraceJob& job) override;
    std::optional<SacctLayout> layout_;
    bool trailingSeparator_ = false;
};

// Standard Workload Format: ';' comments (UnixStartTime gives the epoch of time 0), then 18
// whitespace-separated numeric fields per job, -1 for unknown.
class SwfReader final : public LineReader {
public:
    explicit SwfReader(const std::filesystem::path& path);

private:
    // Skips the comment lines, reading UnixStartTime from them.
    bool nextRow() override;
    const char* rowToJob(TraceJob& job) override;
    std::int64_t unixStartTime_ = 0;
};

// NREL Eagle's job records (the OEDI "Eagle HPC jobs" CSV and its 1,000-job sample): a comma-separated
// header naming the columns (job_id, submit_time, start_time, end_time, wallclock_req, nodes_req, ...),
// then one row per job; fields may be double-quoted (RFC 4180: "" is a quote, and a quoted field may
// hold commas and line breaks).
// True for a comma-separated header line naming job_id, submit_time and start_time.
bool looksLikeEagleHeader(std::string_view line);

class EagleCsvReader final : public LineReader {
public:
    explicit EagleCsvReader(const std::filesystem::path& path);

    enum class Column {
        Ignored,
        JobId,
        User,
        Partition,
        WallclockReq,
        NodesReq,
        ProcessorsReq,
        GpusReq,
        SubmitTime,
        StartTime,
        EndTime,
        RunTime,
        State,
        Name
    };

private:
    // Joins the physical lines of a row whose quoted field spans line breaks.
    bool nextRow() override;
    const char* rowToJob(TraceJob& job) override;

    std::vector<Column> columns_;
    std::string joined_; // a row of several lines, or a row with quotes, unescaped
    std::string unquoted_;
};

// `sacct --json`: streams the top-level "jobs" array one job object at a time.
class SacctJsonReader final : public RowReader {
public:
    explicit SacctJsonReader(const std::filesystem::path& path);

private:
    bool nextRow() override;
    const char* rowToJob(TraceJob& job) override;
    int skipSpace();
    int expectByte();
    void readString(std::string& out);
    void skipValue(int first);
    void captureObject(std::string& out);
    [[noreturn]] void fail(const std::string& what);

    bool inJobs_ = false;
    bool done_ = false;
    int rowStart_ = -1; // the first byte of the current row
    std::string object_;
    std::string key_;
};

} // namespace baton::trace
