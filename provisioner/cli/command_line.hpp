// batonctl's option framework: each command declares its options and arguments once (name, value name,
// help text, default) and gets from that declaration both its parser and its `--help` text, so that the
// help cannot drift from what the parser accepts. Options are `--name VALUE`, `--name=VALUE` or flags;
// they may come before, between or after the arguments; `--` ends the options. Anything undeclared, a
// missing value or a wrong number of arguments is a UsageError (exit status 2).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace baton::ctl {

// Exit statuses of every batonctl command (documented in provisioner/README.md).
enum ExitCode : int {
    exitOk = 0,
    exitFailure = 1, // the command ran and failed: server error, unreachable server, database error, ...
    exitUsage = 2, // bad command line
    exitNotFound = 3, // batond: no such chain (404)
    exitDenied = 4, // batond: credential refused or not yours (401, 403)
    exitConflict = 5, // batond: transition not allowed in the chain's state (409)
};

// Thrown for bad command lines. `command` (e.g. "batonctl trace import") names whose --help to suggest.
class UsageError : public std::runtime_error {
public:
    explicit UsageError(const std::string& message, std::string command = {})
        : std::runtime_error(message)
        , command_(std::move(command))
    { }
    const std::string& command() const { return command_; }

private:
    std::string command_;
};

struct OptionSpec {
    std::string name; // without the leading dashes
    std::string valueName; // empty: a flag, which takes no value
    std::string help;
    std::optional<std::string> defaultValue; // shown in the help; what value() returns when absent
};

struct ArgumentSpec {
    enum class Kind { Required, Optional, Trailing };
    std::string name;
    std::string help;
    Kind kind;
};

class ParsedCommand;

// The declaration of one command: `path` is how it is invoked ("batonctl trace import").
class CommandSpec {
public:
    CommandSpec(std::string path, std::string summary);

    CommandSpec& option(std::string name, std::string valueName, std::string help,
        std::optional<std::string> defaultValue = std::nullopt);
    CommandSpec& flag(std::string name, std::string help);
    // Positional arguments, in order: required ones first, then optional ones.
    CommandSpec& argument(std::string name, std::string help);
    CommandSpec& optionalArgument(std::string name, std::string help);
    // The words after `--`, passed on untouched (e.g. sbatch's own options).
    CommandSpec& trailing(std::string name, std::string help);
    // A paragraph at the end of the help (examples, environment).
    CommandSpec& note(std::string text);

    const std::string& path() const { return path_; }
    const std::string& summary() const { return summary_; }
    std::string usageLine() const;
    std::string help() const;

    // Throws UsageError. `--help`/`-h` is always accepted: see ParsedCommand::helpRequested.
    ParsedCommand parse(std::span<const std::string> args) const;

    const OptionSpec* findOption(std::string_view name) const;
    const std::vector<ArgumentSpec>& argumentSpecs() const { return arguments_; }

private:
    std::string path_;
    std::string summary_;
    std::vector<OptionSpec> options_;
    std::vector<ArgumentSpec> arguments_;
    std::vector<std::string> notes_;
};

class ParsedCommand {
public:
    bool helpRequested() const { return help_; }

    // Whether the option was given on the command line (a default does not count).
    bool has(std::string_view name) const;
    bool flag(std::string_view name) const { return has(name); }
    // The given value, else the declared default, else nothing.
    std::optional<std::string> value(std::string_view name) const;
    std::string text(std::string_view name) const { return value(name).value_or(""); }
    // Typed values; a malformed one is a UsageError naming the option. Absent without default: fallback.
    double number(std::string_view name, double fallback = 0) const;
    long long integer(std::string_view name, long long fallback = 0) const;
    std::vector<int> positiveIntegers(std::string_view name) const; // "N,N,..."

    // A declared argument's value; empty when an optional one was not given.
    std::string argument(std::string_view name) const;
    const std::vector<std::string>& arguments() const { return arguments_; }
    const std::vector<std::string>& trailing() const { return trailing_; }

    // A UsageError that points at this command's help.
    UsageError usageError(const std::string& message) const { return UsageError(message, spec_->path()); }

private:
    friend class CommandSpec;
    explicit ParsedCommand(const CommandSpec& spec)
        : spec_(&spec)
    { }
    const OptionSpec& declared(std::string_view name) const;

    const CommandSpec* spec_;
    bool help_ = false;
    std::map<std::string, std::string, std::less<>> values_;
    std::vector<std::string> arguments_;
    std::vector<std::string> trailing_;
};

// A group of subcommands (`batonctl trace import|list|stats`): the first word picks the subcommand, whose
// declaration parses the rest. `batonctl GROUP --help` lists the subcommands.
struct Subcommand {
    CommandSpec spec;
    std::function<int(const ParsedCommand&)> run;
};

int dispatch(const std::string& groupPath, const std::string& summary,
    std::span<const Subcommand> subcommands, std::span<const std::string> args);

// A single command: parses args with spec, prints the help if asked, else runs.
int runCommand(const CommandSpec& spec, std::span<const std::string> args,
    const std::function<int(const ParsedCommand&)>& run);

} // namespace baton::ctl
