#include "command.hpp"

#include "baton_version.h"

#include <iostream>

namespace baton::ctl {

int versionCommand(std::span<const std::string> args)
{
    static const CommandSpec spec("batonctl version", "Print batonctl's version.");
    return runCommand(spec, args, [](const ParsedCommand&) {
        std::cout << "batonctl " << BATON_VERSION << (BATON_HAVE_CUDA ? " (CUDA)" : "") << "\n";
        return exitOk;
    });
}

} // namespace baton::ctl
