// The plugin's name for the descriptor owner shared by every component (common/unique_fd.hpp).
#pragma once

#include "common/unique_fd.hpp"

namespace baton::spank {

using os::UniqueFd;

} // namespace baton::spank
