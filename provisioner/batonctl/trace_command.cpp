#include "command.hpp"

#include "db/connection.hpp"
#include "db/trace_store.hpp"
#include "trace/fields.hpp"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>

namespace baton::ctl {

namespace {

std::string fixed(double value, int decimals = 1)
{
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

double parseFraction(const ParsedCommand& options, const std::string& text)
{
    double value = -1;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < 0 || value > 1)
        throw options.usageError("--max-rejected needs a fraction between 0 and 1, got '" + text + "'");
    return value;
}

int importCommand(const ParsedCommand& options)
{
    db::ImportOptions import;
    const std::string formatText = options.text("format");
    const auto format = trace::parseFormat(formatText);
    if (!format)
        throw options.usageError("unknown --format '" + formatText + "'");
    import.format = *format;
    import.name = options.value("name").value_or("");
    import.replace = options.flag("replace");
    if (auto fraction = options.value("max-rejected"))
        import.maxRejectedFraction = parseFraction(options, *fraction);
    const std::filesystem::path file = options.argument("FILE");

    db::Connection connection(databaseConninfo(options));
    const auto started = std::chrono::steady_clock::now();
    const auto result = db::importTrace(connection, file, import);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::cout << "imported trace '" << result.name << "' (id " << result.traceId << ") from " << file.string()
              << "\n"
              << result.summary.toString() << "stored " << result.rowsStored << " jobs in "
              << fixed(seconds, 2) << " s ("
              << fixed(static_cast<double>(result.rowsStored) / std::max(seconds, 1e-9), 0) << " rows/s)\n";
    return exitOk;
}

int listCommand(const ParsedCommand& options)
{
    db::Connection connection(databaseConninfo(options));
    const auto traces = db::listTraces(connection);
    if (traces.empty()) {
        std::cout << "no traces imported\n";
        return exitOk;
    }
    std::printf("%-24s %-15s %10s %10s  %-19s  %s\n", "name", "format", "jobs", "rejected", "imported (UTC)",
        "source");
    for (const auto& t : traces)
        std::printf("%-24s %-15s %10lld %10lld  %-19s  %s\n", t.name.c_str(), t.format.c_str(),
            static_cast<long long>(t.rowsAccepted), static_cast<long long>(t.rowsRead - t.rowsAccepted),
            t.importedAt.c_str(), t.source.c_str());
    return exitOk;
}

int statsCommand(const ParsedCommand& options)
{
    std::optional<long long> clusterNodes;
    if (auto nodes = options.value("nodes")) {
        long long value = 0;
        auto [end, error] = std::from_chars(nodes->data(), nodes->data() + nodes->size(), value);
        if (error != std::errc() || end != nodes->data() + nodes->size() || value <= 0)
            throw options.usageError("--nodes needs a positive integer");
        clusterNodes = value;
    }
    db::Connection connection(databaseConninfo(options));
    const auto stats = db::traceStats(connection, options.argument("NAME"));
    std::cout << "trace " << stats.name << ": " << stats.jobs << " jobs, " << stats.started << " started\n";
    if (stats.firstSubmit && stats.lastEvent)
        std::cout << "span: " << trace::formatTimestamp(*stats.firstSubmit) << " .. "
                  << trace::formatTimestamp(*stats.lastEvent) << " UTC ("
                  << fixed(static_cast<double>(stats.spanSeconds()) / 86400.0, 1) << " days)\n";
    if (stats.waitP50)
        std::cout << "wait (s): mean " << fixed(*stats.waitMean) << ", p50 " << fixed(*stats.waitP50)
                  << ", p90 " << fixed(*stats.waitP90) << ", p99 " << fixed(*stats.waitP99) << "\n";
    std::cout << "node-count mix:";
    std::int64_t shown = 0;
    std::size_t listed = 0;
    for (const auto& [nodes, count] : stats.nodeMix) {
        if (listed++ == 8)
            break;
        shown += count;
        std::cout << (listed > 1 ? "," : "") << " " << nodes << "n " << count << " ("
                  << fixed(100.0 * static_cast<double>(count) / static_cast<double>(stats.jobs)) << "%)";
    }
    if (shown < stats.jobs)
        std::cout << ", other " << stats.jobs - shown;
    std::cout << "\noffered load: " << fixed(stats.nodeSeconds / 3600.0, 0) << " node-hours, "
              << fixed(stats.offeredNodes(), 2) << " nodes busy on average";
    if (clusterNodes)
        std::cout << " (" << fixed(100.0 * stats.offeredNodes() / static_cast<double>(*clusterNodes))
                  << "% of " << *clusterNodes << " nodes)";
    std::cout << "\n";
    return exitOk;
}

} // namespace

int traceCommand(std::span<const std::string> args)
{
    static const std::vector<Subcommand> subcommands = [] {
        CommandSpec import("batonctl trace import", "Import a job trace into the database (all or nothing).");
        import.argument("FILE", "the trace file")
            .option("format", "FORMAT", "auto|sacct|sacct-text|sacct-parsable|sacct-json|swf|eagle-csv", "auto")
            .option("name", "NAME", "the trace's name (default: the file's name)")
            .flag("replace", "replace a trace of the same name")
            .option("max-rejected", "FRACTION", "refuse the file if more rows than this are bad", "0.05");
        CommandSpec list("batonctl trace list", "List the imported traces.");
        CommandSpec stats("batonctl trace stats", "Wait-time statistics, node-count mix and offered load.");
        stats.argument("NAME", "the trace's name")
            .option("nodes", "N", "cluster size, to express the load as a share of it");
        for (auto* spec : { &import, &list, &stats })
            addDatabaseOption(*spec);
        return std::vector<Subcommand> { { import, importCommand }, { list, listCommand },
            { stats, statsCommand } };
    }();
    return dispatch("batonctl trace", "Job traces in the database.", subcommands, args);
}

} // namespace baton::ctl
