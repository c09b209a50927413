// The columns of sacct's tabular output (fixed-width or --parsable2), found by their header names,
// and the conversion of one row into a TraceJob.
#pragma once

#include "trace_job.hpp"

#include <string_view>
#include <vector>

namespace baton::trace {

class SacctLayout {
public:
    // Header names as sacct prints them; fixed-width headers may be cut to the column width
    // ("TimelimitR"), so a name that is the start of exactly one known column also matches.
    // Throws TraceError when a column the readers need is missing.
    explicit SacctLayout(const std::vector<std::string_view>& names);

    std::size_t columnCount() const { return columns_.size(); }
    // Fills `job` from the row's fields; returns nullptr on success, else the reason to reject it.
    const char* toJob(const std::vector<std::string_view>& fields, TraceJob& job) const;

    enum class Column {
        Ignored,
        JobId,
        JobIdRaw,
        JobName,
        Uid,
        User,
        Submit,
        Start,
        End,
        Priority,
        TimelimitRaw,
        Timelimit,
        ExitCode,
        State,
        NNodes,
        AllocNodes,
        ReqNodes,
        ReqCpus,
        AllocCpus, // AllocCPUS or NCPUS
        AllocTres,
        ReqTres,
        Partition,
        Elapsed
    };

private:
    std::vector<Column> columns_;
};

} // namespace baton::trace
