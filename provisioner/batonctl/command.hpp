// batonctl's command groups. A group is one entry in the table in commands.cpp and one handler,
// usually in its own file: `batonctl GROUP ARGS...` calls the handler with ARGS.
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace baton::ctl {

// Exit codes of every command.
enum ExitCode : int { exitOk = 0, exitFailure = 1, exitUsage = 2 };

using Handler = int (*)(std::span<const std::string> args);

struct CommandGroup {
    std::string_view name;
    std::string_view summary; // one line for `batonctl help`
    Handler run;
};

std::span<const CommandGroup> commandGroups();

// Thrown for bad command lines; main() prints it with the usage and exits with exitUsage.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Handlers of the groups (one file each).
int versionCommand(std::span<const std::string> args);
int dbCommand(std::span<const std::string> args);
int traceCommand(std::span<const std::string> args);

} // namespace baton::ctl
