#include "spank_api.hpp"

namespace baton::spank {

void logError(const std::string& message)
{
    slurm_error("baton: %s", message.c_str());
}

void logVerbose(const std::string& message)
{
    slurm_verbose("baton: %s", message.c_str());
}

void logUser(const std::string& message)
{
    slurm_spank_log("baton: %s", message.c_str());
}

bool spankOk(spank_err_t rc, const char* call)
{
    if (rc == ESPANK_SUCCESS) {
        return true;
    }
    slurm_error("baton: %s failed: %s", call, spank_strerror(rc));
    return false;
}

} // namespace baton::spank
