// sbatch and salloc: the options were validated one by one as they were parsed; here their combination
// is checked for the submitting user so that a refused directory fails the submission.
#include "contexts.hpp"
#include "options.hpp"

#include <unistd.h>

namespace baton::spank {

int checkOptionsAtSubmission(uid_t uid)
{
    const BatonOptions& options = batonOptions();
    if (!options.enabled) {
        return 0;
    }
    try {
        const UserInfo user = lookupUser(uid);
        // The job name may still change before the job starts; a chain named after it is checked
        // in the job. Only an explicit chain or directory can be refused here.
        if (options.chain || options.dir) {
            resolveChainLocation(options, pluginConfig(), user, "job");
        }
        return 0;
    } catch (const std::exception& e) {
        logError(e.what());
        return -1;
    }
}

int allocatorPostOpt(spank_t)
{
    // S_JOB_UID is not available in the allocator context: the submitting user is the job's user.
    return checkOptionsAtSubmission(::getuid());
}

} // namespace baton::spank
