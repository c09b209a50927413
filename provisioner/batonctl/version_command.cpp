#include "command.hpp"

#include "baton_version.h"

#include <iostream>

namespace baton::ctl {

int versionCommand(std::span<const std::string> args)
{
    if (!args.empty())
        throw UsageError("usage: batonctl version");
    std::cout << "batonctl " << BATON_VERSION << (BATON_HAVE_CUDA ? " (CUDA)" : "") << "\n";
    return exitOk;
}

} // namespace baton::ctl
