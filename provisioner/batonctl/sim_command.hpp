// The `sim` command group: `sim fit`, `sim run`, `sim compare`.
#pragma once

#include <span>
#include <string>

namespace baton::sim {

// args are the words after `sim`. Returns the process exit status; prints errors to stderr.
int runSimCommand(std::span<const std::string> args);

} // namespace baton::sim
