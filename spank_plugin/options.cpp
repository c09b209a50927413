#include "options.hpp"

#include "paths.hpp"
#include "values.hpp"

#include <stdexcept>

namespace baton::spank {

namespace {

enum OptionId { OptBaton = 1, OptDir, OptOverhead, OptMargin, OptHandoverWait, OptSeq };

int onOption(int id, const char* optarg, int remote)
{
    BatonOptions& options = batonOptions();
    std::string value = optarg ? optarg : "";
    // Slurm forwards an absent optional argument through the environment as the text "(null)"
    // (e.g. sbatch --baton, then srun inside the job); parentheses are not valid in a chain name.
    if (id == OptBaton && value == "(null)") {
        value.clear();
    }
    const char* name = id == OptBaton ? "--baton"
        : id == OptDir                ? "--baton-dir"
        : id == OptOverhead           ? "--baton-overhead"
        : id == OptMargin             ? "--baton-margin"
        : id == OptHandoverWait       ? "--baton-handover-wait"
                                      : "--baton-seq";
    try {
        switch (id) {
        case OptBaton:
            if (!value.empty()) {
                validateChainName(value);
                options.chain = value;
            }
            break;
        case OptDir:
            options.dir = normalizeAbsolutePath(value);
            break;
        case OptOverhead:
            options.overheadPercent = parseOverheadPercent(value);
            break;
        case OptMargin:
            options.marginSeconds = parseMarginSeconds(value);
            break;
        case OptHandoverWait:
            options.handoverWaitSeconds = parseHandoverWaitSeconds(value);
            break;
        case OptSeq:
            options.seq = parseChainSeq(value);
            break;
        default:
            return -1;
        }
        options.enabled = true;
        return 0;
    } catch (const std::exception& e) {
        logError(std::string(name) + ": " + e.what() + (remote ? " (in the job request)" : ""));
        return -1;
    }
}

struct spank_option optionTable[] = {
    { const_cast<char*>("baton"), const_cast<char*>("CHAIN"),
        const_cast<char*>("Run as part of the baton chain CHAIN (default: the job name): checkpoint "
                          "settings, chain directory and deadline are passed to the job's tasks."),
        2, OptBaton, onOption },
    { const_cast<char*>("baton-dir"), const_cast<char*>("PATH"),
        const_cast<char*>(
            "Chain directory (default: <chain root>/<chain>); must be inside an allowed prefix."),
        1, OptDir, onOption },
    { const_cast<char*>("baton-overhead"), const_cast<char*>("PCT"),
        const_cast<char*>("Checkpoint overhead target, percent of training time (0 < PCT < 100)."), 1,
        OptOverhead, onOption },
    { const_cast<char*>("baton-margin"), const_cast<char*>("SECONDS"),
        const_cast<char*>("Commit the final checkpoint this many seconds before the job's end time."), 1,
        OptMargin, onOption },
    // batond gives 0 to a successor that it submits after its predecessor ended: no final checkpoint
    // can come any more (a node that failed, a job that crashed).
    { const_cast<char*>("baton-handover-wait"), const_cast<char*>("SECONDS"),
        const_cast<char*>("How long a successor waits for its predecessor's final checkpoint before it "
                          "restores (default: plugstack handover_wait; 0: no wait)."),
        1, OptHandoverWait, onOption },
    // batond gives every job it submits its seq: with two successors in flight, the order in which the
    // chain's jobs start need not be the order of their seqs (both may start in one second).
    { const_cast<char*>("baton-seq"), const_cast<char*>("N"),
        const_cast<char*>("The job's position in its chain (set by batond; default: how many of the chain's "
                          "jobs started before it)."),
        1, OptSeq, onOption },
    SPANK_OPTIONS_TABLE_END,
};

} // namespace

BatonOptions& batonOptions()
{
    static BatonOptions options;
    return options;
}

PluginConfig& pluginConfig()
{
    static PluginConfig config;
    return config;
}

std::optional<std::string>& configError()
{
    static std::optional<std::string> error;
    return error;
}

bool registerOptions(spank_t sp)
{
    for (auto* option = optionTable; option->name != nullptr; ++option) {
        if (!spankOk(spank_option_register(sp, option), "spank_option_register")) {
            return false;
        }
    }
    return true;
}

ChainLocation resolveChainLocation(
    const BatonOptions& options, const PluginConfig& config, const UserInfo& user, const std::string& jobName)
{
    ChainLocation location;
    location.chain = options.chain ? *options.chain : chainNameFromJobName(jobName);
    validateChainName(location.chain);
    const std::string root = normalizeAbsolutePath(expandUserPattern(config.chainRoot, user));
    location.dir = normalizeAbsolutePath(options.dir ? *options.dir : root + "/" + location.chain);
    std::vector<std::string> prefixes { root };
    for (const auto& pattern : config.allowedPrefixes) {
        prefixes.push_back(expandUserPattern(pattern, user));
    }
    location.prefix = findAllowedPrefix(location.dir, prefixes);
    return location;
}

} // namespace baton::spank
