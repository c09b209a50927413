// spank_baton.so: the symbols Slurm looks up, and a dispatcher on spank_context(). Every entry point
// catches everything: no exception may unwind into Slurm's C code.
#include "config.hpp"
#include "contexts.hpp"
#include "options.hpp"

#include <exception>
#include <string>
#include <vector>

extern "C" {
// SPANK_PLUGIN(baton, 1), spelled out: in C++ a namespace-scope const has internal linkage.
extern const char plugin_name[] = "baton";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
extern const unsigned int spank_plugin_version = 1;
}

namespace {

using namespace baton::spank;

bool activeContext()
{
    const spank_context_t context = spank_context();
    return context == S_CTX_LOCAL || context == S_CTX_REMOTE || context == S_CTX_ALLOCATOR;
}

template<typename Body> int guarded(const char* callback, Body body) noexcept
{
    try {
        return body();
    } catch (const std::exception& e) {
        try {
            logError(std::string(callback) + ": " + e.what());
        } catch (...) { }
    } catch (...) {
        slurm_error("baton: %s: unexpected error", callback);
    }
    return -1;
}

} // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char** av)
{
    return guarded("init", [&] {
        if (!activeContext()) {
            return 0;
        }
        try {
            pluginConfig() = parseConfig(std::vector<std::string>(av, av + ac));
        } catch (const std::exception& e) {
            logError(e.what());
            if (spank_context() != S_CTX_REMOTE) {
                return -1; // sbatch, salloc and srun stop with the message
            }
            // In slurmstepd a failed init would fail (and for batch jobs drain the node for) every
            // job; only jobs that use --baton are refused.
            configError() = e.what();
        }
        return registerOptions(sp) ? 0 : -1;
    });
}

int slurm_spank_init_post_opt(spank_t sp, int, char**)
{
    return guarded(
        "init_post_opt", [&] { return spank_context() == S_CTX_ALLOCATOR ? allocatorPostOpt(sp) : 0; });
}

int slurm_spank_local_user_init(spank_t sp, int, char**)
{
    return guarded("local_user_init", [&] { return localUserInit(sp); });
}

int slurm_spank_user_init(spank_t sp, int, char**)
{
    // Never fails: a failed user_init drains the node for batch jobs; remoteUserInit refuses steps
    // through task_init instead.
    guarded("user_init", [&] { return spank_remote(sp) ? remoteUserInit(sp) : 0; });
    return 0;
}

int slurm_spank_task_init(spank_t sp, int, char**)
{
    return guarded("task_init", [&] { return spank_remote(sp) ? remoteTaskInit(sp) : 0; });
}

int slurm_spank_task_exit(spank_t sp, int, char**)
{
    // A report never fails the step.
    guarded("task_exit", [&] { return spank_remote(sp) ? remoteTaskExit(sp) : 0; });
    return 0;
}

int slurm_spank_exit(spank_t sp, int, char**)
{
    guarded("exit", [&] { return spank_remote(sp) ? remoteExit(sp) : 0; });
    return 0;
}

} // extern "C"
