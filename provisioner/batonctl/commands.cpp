#include "command.hpp"

#include "sim_command.hpp"

namespace baton::ctl {

std::span<const CommandGroup> commandGroups()
{
    // One line per group.
    static const CommandGroup groups[] = {
        { "version", "print the version", versionCommand },
        { "db", "database schema: migrate, status", dbCommand },
        { "trace", "job traces: import, list, stats", traceCommand },
        { "sim", "queue simulator and provisioning policies: fit, run, compare", sim::runSimCommand },
    };
    return groups;
}

} // namespace baton::ctl
