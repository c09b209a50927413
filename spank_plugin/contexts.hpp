// One entry point per SPANK context and callback; plugin.cpp dispatches on spank_context().
#pragma once

#include "spank_api.hpp"

namespace baton::spank {

// allocator.cpp: sbatch and salloc.
int allocatorPostOpt(spank_t sp);

// local.cpp: srun.
int localUserInit(spank_t sp);

// remote.cpp: slurmstepd.
int remoteUserInit(spank_t sp);
int remoteTaskInit(spank_t sp);
int remoteTaskExit(spank_t sp);
int remoteExit(spank_t sp);

// Shared by allocator and local: checks the combination of options for the job's user, so that a bad
// directory fails at submission. Returns 0 or -1 (the message already shown).
int checkOptionsAtSubmission(uid_t uid);

} // namespace baton::spank
