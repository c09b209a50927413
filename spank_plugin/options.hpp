// The plugin's command-line options for sbatch, salloc and srun, and the values they carried. In
// slurmstepd the same callbacks run again with the values from the job request, which the user
// controls: every value is validated there too.
#pragma once

#include "config.hpp"
#include "spank_api.hpp"

#include <optional>
#include <string>

namespace baton::spank {

struct BatonOptions {
    bool enabled = false; // any --baton* option enables the plugin for the job
    std::optional<std::string> chain; // --baton=CHAIN
    std::optional<std::string> dir; // --baton-dir=PATH, normalized
    std::optional<double> overheadPercent;
    std::optional<int> marginSeconds;
    std::optional<int> handoverWaitSeconds; // --baton-handover-wait, over plugstack handover_wait
    std::optional<int> seq; // --baton-seq: the job's position in its chain, as batond submitted it
};

// The process's plugin state: set up by slurm_spank_init, filled by the option callbacks.
BatonOptions& batonOptions();
PluginConfig& pluginConfig();
// Set when plugstack.conf is invalid in slurmstepd: steps with --baton are then refused with it.
std::optional<std::string>& configError();

// Registers the option table; false (logged) on failure.
bool registerOptions(spank_t sp);

// The chain directory the options ask for, and the prefix that allows it, for `user`. Throws
// std::invalid_argument with a message fit for the user.
struct ChainLocation {
    std::string chain;
    std::string dir;
    std::string prefix;
};
ChainLocation resolveChainLocation(const BatonOptions& options, const PluginConfig& config,
    const UserInfo& user, const std::string& jobName);

} // namespace baton::spank
