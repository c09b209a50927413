// Small helpers of the trace reader tests.
#pragma once

#include "trace/fields.hpp"
#include "trace/trace_reader.hpp"

#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace baton::test {

// Seconds since the epoch of "YYYY-MM-DD HH:MM:SS" (or the other forms the readers take), as UTC.
inline std::int64_t utc(const char* text)
{
    return *trace::parseTimestamp(text);
}

// How many rows of the trace were rejected for `reason`.
inline std::uint64_t rejectedFor(const trace::TraceSummary& summary, const std::string& reason)
{
    auto it = summary.rejected.find(reason);
    return it == summary.rejected.end() ? 0 : it->second.count;
}

struct ReadTrace {
    std::vector<trace::TraceJob> jobs;
    trace::TraceSummary summary;
};

// Reads a whole trace and checks which reader took it.
inline ReadTrace readAs(
    const std::filesystem::path& path, trace::TraceFormat expected, trace::TraceFormat hint = trace::TraceFormat::Auto)
{
    ReadTrace trace;
    trace.jobs = trace::readAll(path, hint, &trace.summary);
    EXPECT_EQ(trace.summary.format, expected) << path;
    return trace;
}

// Writes `text` to a file in `dir` and reads it as `format`.
inline ReadTrace readText(
    const TempDir& dir, const char* name, const std::string& text, trace::TraceFormat format)
{
    const auto path = dir.path() / name;
    {
        std::ofstream out(path, std::ios::binary);
        out << text;
    }
    return readAs(path, format, format);
}

} // namespace baton::test
