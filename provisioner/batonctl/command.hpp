// batonctl's command groups. A group is one entry in the table in commands.cpp and one handler,
// usually in its own file: `batonctl GROUP ARGS...` calls the handler with ARGS. Handlers declare their
// command lines with the option framework (command_line.hpp), which also writes their --help.
#pragma once

#include "cli/command_line.hpp"

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace baton::ctl {

using Handler = int (*)(std::span<const std::string> args);

struct CommandGroup {
    std::string_view name;
    std::string_view summary; // one line for `batonctl help`
    Handler run;
};

std::span<const CommandGroup> commandGroups();

// Handlers of the groups.
int versionCommand(std::span<const std::string> args);
int dbCommand(std::span<const std::string> args);
int traceCommand(std::span<const std::string> args);
// The queue simulator and the policies it evaluates (sim_command.cpp and the sim_*.cpp beside it).
int simCommand(std::span<const std::string> args);
// Chain commands, talking to batond (chain_commands.cpp).
int submitCommand(std::span<const std::string> args);
int chainsCommand(std::span<const std::string> args);
int showCommand(std::span<const std::string> args);
int policyCommand(std::span<const std::string> args);
int resubmitCommand(std::span<const std::string> args);
int preemptCommand(std::span<const std::string> args);
int pauseCommand(std::span<const std::string> args);
int resumeCommand(std::span<const std::string> args);
int cancelCommand(std::span<const std::string> args);

// A failure with its own exit status (e.g. exitNotFound); main() prints "batonctl: <what>".
class CommandFailure : public std::runtime_error {
public:
    CommandFailure(int exitCode, const std::string& message)
        : std::runtime_error(message)
        , exitCode_(exitCode)
    { }
    int exitCode() const { return exitCode_; }

private:
    int exitCode_;
};

// The database option shared by the commands that use PostgreSQL directly.
void addDatabaseOption(CommandSpec& spec);
// --database, else $BATON_DATABASE, else libpq's PG* environment (empty conninfo).
std::string databaseConninfo(const ParsedCommand& command);

} // namespace baton::ctl
