// Small helpers of the trace reader tests.
#pragma once

#include "trace/fields.hpp"
#include "trace/trace_reader.hpp"

#include <cstdint>
#include <string>

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

} // namespace baton::test
