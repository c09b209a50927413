// srun: after the allocation exists (so the job's user is known), before the step is launched.
#include "contexts.hpp"
#include "options.hpp"

#include "common/users.hpp"

#include <unistd.h>

namespace baton::spank {

int localUserInit(spank_t sp)
{
    if (!batonOptions().enabled) {
        return 0;
    }
    uid_t uid = 0;
    if (!spankOk(spank_get_item(sp, S_JOB_UID, &uid), "spank_get_item(S_JOB_UID)")) {
        return -1;
    }
    // Slurm 24.11's srun reports a uid that no user has here (its placeholder 99) before the step
    // exists; srun runs as the job's user there (srun --uid is gone since 23.11), so that is the uid.
    if (!os::findUser(uid)) {
        uid = ::getuid();
    }
    return checkOptionsAtSubmission(uid);
}

} // namespace baton::spank
