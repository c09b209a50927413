// srun: after the allocation exists (so the job's user is known), before the step is launched.
#include "contexts.hpp"
#include "options.hpp"

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
    return checkOptionsAtSubmission(uid);
}

} // namespace baton::spank
