// Job traces in the database: import with one COPY inside one transaction (all or nothing), the
// list of imported traces, and their statistics computed in SQL.
#pragma once

#include "connection.hpp"
#include "trace/trace_reader.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace baton::db {

struct ImportOptions {
    std::string name; // defaults to the file's name without directory
    trace::TraceFormat format = trace::TraceFormat::Auto;
    bool replace = false; // replace a trace of the same name instead of refusing
    // More rejected rows than this fraction of the rows read fails the import: the file is probably
    // not what it claims to be.
    double maxRejectedFraction = 0.05;
};

struct ImportResult {
    std::int64_t traceId = 0;
    std::string name;
    trace::TraceSummary summary;
    std::uint64_t rowsStored = 0;
};

// Throws trace::TraceError or DbError; on any error nothing of the trace is left in the database.
ImportResult importTrace(
    Connection& connection, const std::filesystem::path& path, const ImportOptions& options);

struct TraceInfo {
    std::int64_t id = 0;
    std::string name;
    std::string format;
    std::string source;
    std::string importedAt;
    std::int64_t rowsRead = 0;
    std::int64_t rowsAccepted = 0;
};

std::vector<TraceInfo> listTraces(Connection& connection);

struct TraceStats {
    std::string name;
    std::int64_t jobs = 0;
    std::int64_t started = 0; // jobs with a known start
    std::optional<std::int64_t> firstSubmit;
    std::optional<std::int64_t> lastEvent; // latest end (or start, or submit)
    std::optional<double> waitP50, waitP90, waitP99, waitMean; // seconds, over started jobs
    double nodeSeconds = 0; // sum of nodes x run time (end - start, else the recorded run time)
    std::vector<std::pair<std::int32_t, std::int64_t>> nodeMix; // node count -> jobs, most common first

    std::int64_t spanSeconds() const { return firstSubmit && lastEvent ? *lastEvent - *firstSubmit : 0; }
    // Offered load: the average number of nodes the trace's jobs keep busy over its span.
    double offeredNodes() const
    {
        return spanSeconds() > 0 ? nodeSeconds / static_cast<double>(spanSeconds()) : 0;
    }
};

// Throws DbError if no trace has this name.
TraceStats traceStats(Connection& connection, std::string_view name);

} // namespace baton::db
