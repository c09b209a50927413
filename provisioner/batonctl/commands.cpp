#include "command.hpp"

#include <cstdlib>

namespace baton::ctl {

std::span<const CommandGroup> commandGroups()
{
    // One line per group.
    static const CommandGroup groups[] = {
        { "submit", "start a chain: submit its first job through batond", submitCommand },
        { "chains", "list chains (your own; all for operators)", chainsCommand },
        { "show", "one chain: jobs, checkpoints, handovers, decisions", showCommand },
        { "policy", "choose when batond submits a chain's successors", policyCommand },
        { "resubmit", "submit a chain's next job now", resubmitCommand },
        { "preempt", "hand a running chain over to its successor now", preemptCommand },
        { "pause", "stop submitting successors of a chain", pauseCommand },
        { "resume", "submit successors of a paused chain again", resumeCommand },
        { "cancel", "cancel a chain and its jobs", cancelCommand },
        { "version", "print the version", versionCommand },
        { "db", "database schema: migrate, status", dbCommand },
        { "trace", "job traces: import, list, stats", traceCommand },
        { "sim", "queue simulator and provisioning policies: fit, run, compare", simCommand },
    };
    return groups;
}

void addDatabaseOption(CommandSpec& spec)
{
    spec.option("database", "CONNINFO",
        "PostgreSQL connection string or URI; else $BATON_DATABASE, else the PG* environment");
}

std::string databaseConninfo(const ParsedCommand& command)
{
    if (auto database = command.value("database"))
        return *database;
    if (const char* env = std::getenv("BATON_DATABASE"); env && *env)
        return env;
    return {};
}

} // namespace baton::ctl
