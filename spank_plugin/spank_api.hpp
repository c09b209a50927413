// Slurm's SPANK header (C) and the plugin's logging: every line starts with "baton".
#pragma once

extern "C" {
#include <slurm/spank.h>
}

#include <string>

namespace baton::spank {

// Node log (slurmd/slurmstepd log, or the command's stderr in srun/sbatch/salloc).
void logError(const std::string& message);
void logVerbose(const std::string& message);
// Shown to the user in srun/sbatch/salloc.
void logUser(const std::string& message);

// Logs a failed spank_* call with spank_strerror and returns false; true for ESPANK_SUCCESS.
bool spankOk(spank_err_t rc, const char* call);

} // namespace baton::spank
