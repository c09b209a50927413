#include "command_line.hpp"

#include <charconv>
#include <iostream>
#include <sstream>

namespace baton::ctl {

namespace {

constexpr std::size_t helpColumn = 28;

template<typename T> std::optional<T> parseWhole(std::string_view text)
{
    T value {};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc {} || end != text.data() + text.size())
        return std::nullopt;
    return value;
}

// "  NAME      help", the help's own lines aligned under its first one.
void appendEntry(std::string& out, const std::string& name, const std::string& help)
{
    std::string line = "  " + name;
    const std::string indent(helpColumn, ' ');
    if (line.size() + 1 > helpColumn) {
        out += line + "\n";
        line = indent;
    } else {
        line.resize(helpColumn, ' ');
    }
    std::istringstream lines(help);
    bool first = true;
    for (std::string text; std::getline(lines, text);) {
        out += (first ? line : indent) + text + "\n";
        first = false;
    }
    if (first)
        out += line + "\n";
}

} // namespace

CommandSpec::CommandSpec(std::string path, std::string summary)
    : path_(std::move(path))
    , summary_(std::move(summary))
{ }

CommandSpec& CommandSpec::option(
    std::string name, std::string valueName, std::string help, std::optional<std::string> defaultValue)
{
    options_.push_back({ std::move(name), std::move(valueName), std::move(help), std::move(defaultValue) });
    return *this;
}

CommandSpec& CommandSpec::flag(std::string name, std::string help)
{
    options_.push_back({ std::move(name), {}, std::move(help), std::nullopt });
    return *this;
}

CommandSpec& CommandSpec::argument(std::string name, std::string help)
{
    arguments_.push_back({ std::move(name), std::move(help), ArgumentSpec::Kind::Required });
    return *this;
}

CommandSpec& CommandSpec::optionalArgument(std::string name, std::string help)
{
    arguments_.push_back({ std::move(name), std::move(help), ArgumentSpec::Kind::Optional });
    return *this;
}

CommandSpec& CommandSpec::trailing(std::string name, std::string help)
{
    arguments_.push_back({ std::move(name), std::move(help), ArgumentSpec::Kind::Trailing });
    return *this;
}

CommandSpec& CommandSpec::note(std::string text)
{
    notes_.push_back(std::move(text));
    return *this;
}

const OptionSpec* CommandSpec::findOption(std::string_view name) const
{
    for (const auto& option : options_)
        if (option.name == name)
            return &option;
    return nullptr;
}

std::string CommandSpec::usageLine() const
{
    std::string line = "usage: " + path_;
    if (!options_.empty())
        line += " [options]";
    for (const auto& argument : arguments_) {
        switch (argument.kind) {
        case ArgumentSpec::Kind::Required:
            line += " " + argument.name;
            break;
        case ArgumentSpec::Kind::Optional:
            line += " [" + argument.name + "]";
            break;
        case ArgumentSpec::Kind::Trailing:
            line += " [-- " + argument.name + "...]";
            break;
        }
    }
    return line;
}

std::string CommandSpec::help() const
{
    std::string out = usageLine() + "\n";
    if (!summary_.empty())
        out += "\n" + summary_ + "\n";
    if (!arguments_.empty()) {
        out += "\narguments:\n";
        for (const auto& argument : arguments_)
            appendEntry(out,
                argument.kind == ArgumentSpec::Kind::Trailing ? "-- " + argument.name + "..." : argument.name,
                argument.help);
    }
    out += "\noptions:\n";
    for (const auto& option : options_) {
        std::string name = "--" + option.name;
        if (!option.valueName.empty())
            name += " " + option.valueName;
        std::string help = option.help;
        if (option.defaultValue)
            help += " (default " + (option.defaultValue->empty() ? "empty" : *option.defaultValue) + ")";
        appendEntry(out, name, help);
    }
    appendEntry(out, "-h, --help", "print this help");
    for (const auto& note : notes_)
        out += "\n" + note + "\n";
    return out;
}

ParsedCommand CommandSpec::parse(std::span<const std::string> args) const
{
    ParsedCommand parsed(*this);
    const bool hasTrailing = !arguments_.empty() && arguments_.back().kind == ArgumentSpec::Kind::Trailing;
    bool optionsEnded = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (optionsEnded) {
            (hasTrailing ? parsed.trailing_ : parsed.arguments_).push_back(arg);
            continue;
        }
        if (arg == "--") {
            optionsEnded = true;
            continue;
        }
        if (arg == "--help" || arg == "-h") {
            parsed.help_ = true;
            continue;
        }
        if (arg.size() < 2 || arg[0] != '-') { // "-" alone is an argument (standard input, by custom)
            parsed.arguments_.push_back(arg);
            continue;
        }
        if (arg[1] != '-')
            throw UsageError("unknown option " + arg, path_);
        std::string name = arg.substr(2);
        std::optional<std::string> inlineValue;
        if (const auto eq = name.find('='); eq != std::string::npos) {
            inlineValue = name.substr(eq + 1);
            name.resize(eq);
        }
        const OptionSpec* option = findOption(name);
        if (!option)
            throw UsageError("unknown option --" + name, path_);
        if (option->valueName.empty()) {
            if (inlineValue)
                throw UsageError("option --" + name + " takes no value", path_);
            parsed.values_[name] = "";
        } else if (inlineValue) {
            parsed.values_[name] = *inlineValue;
        } else {
            // The next word is the value even when it starts with '-': "--offset -5".
            if (i + 1 >= args.size())
                throw UsageError("option --" + name + " needs a value (" + option->valueName + ")", path_);
            parsed.values_[name] = args[++i];
        }
    }
    if (parsed.help_)
        return parsed;
    std::size_t required = 0, allowed = 0;
    for (const auto& argument : arguments_) {
        if (argument.kind == ArgumentSpec::Kind::Required)
            ++required;
        if (argument.kind != ArgumentSpec::Kind::Trailing)
            ++allowed;
    }
    if (parsed.arguments_.size() < required) {
        const auto& missing = arguments_[parsed.arguments_.size()].name;
        throw UsageError("missing " + missing + "; " + usageLine(), path_);
    }
    if (parsed.arguments_.size() > allowed)
        throw UsageError("unexpected argument '" + parsed.arguments_[allowed] + "'; " + usageLine(), path_);
    return parsed;
}

const OptionSpec& ParsedCommand::declared(std::string_view name) const
{
    const OptionSpec* option = spec_->findOption(name);
    if (!option) // a bug in the command, not in its command line
        throw std::logic_error(spec_->path() + ": option --" + std::string(name) + " is not declared");
    return *option;
}

bool ParsedCommand::has(std::string_view name) const
{
    declared(name);
    return values_.find(name) != values_.end();
}

std::optional<std::string> ParsedCommand::value(std::string_view name) const
{
    const OptionSpec& option = declared(name);
    if (const auto it = values_.find(name); it != values_.end())
        return it->second;
    return option.defaultValue;
}

double ParsedCommand::number(std::string_view name, double fallback) const
{
    const auto text = value(name);
    if (!text)
        return fallback;
    const auto parsed = parseWhole<double>(*text);
    if (!parsed)
        throw usageError("--" + std::string(name) + ": not a number: '" + *text + "'");
    return *parsed;
}

long long ParsedCommand::integer(std::string_view name, long long fallback) const
{
    const auto text = value(name);
    if (!text)
        return fallback;
    const auto parsed = parseWhole<long long>(*text);
    if (!parsed)
        throw usageError("--" + std::string(name) + ": not an integer: '" + *text + "'");
    return *parsed;
}

std::vector<int> ParsedCommand::positiveIntegers(std::string_view name) const
{
    const auto text = value(name);
    std::vector<int> out;
    if (!text)
        return out;
    std::stringstream items(*text);
    for (std::string item; std::getline(items, item, ',');) {
        const auto parsed = parseWhole<int>(item);
        if (!parsed || *parsed <= 0)
            throw usageError("--" + std::string(name) + ": expected positive integers, got '" + *text + "'");
        out.push_back(*parsed);
    }
    if (out.empty())
        throw usageError("--" + std::string(name) + ": expected positive integers, got '" + *text + "'");
    return out;
}

std::string ParsedCommand::argument(std::string_view name) const
{
    std::size_t index = 0;
    for (const auto& argument : spec_->argumentSpecs()) {
        if (argument.name == name)
            return index < arguments_.size() ? arguments_[index] : std::string();
        ++index;
    }
    throw std::logic_error(spec_->path() + ": argument " + std::string(name) + " is not declared");
}

int dispatch(const std::string& groupPath, const std::string& summary,
    std::span<const Subcommand> subcommands, std::span<const std::string> args)
{
    auto groupHelp = [&] {
        std::string out = "usage: " + groupPath + " COMMAND [ARGS...]\n\n" + summary + "\n\ncommands:\n";
        for (const auto& sub : subcommands)
            appendEntry(out, sub.spec.path().substr(groupPath.size() + 1), sub.spec.summary());
        out += "\n`" + groupPath + " COMMAND --help` for a command's arguments and options.\n";
        return out;
    };
    if (args.empty())
        throw UsageError("missing COMMAND\n" + groupHelp());
    if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        std::cout << groupHelp();
        return exitOk;
    }
    for (const auto& sub : subcommands)
        if (sub.spec.path() == groupPath + " " + args[0])
            return runCommand(sub.spec, args.subspan(1), sub.run);
    throw UsageError("unknown command '" + args[0] + "'\n" + groupHelp());
}

int runCommand(const CommandSpec& spec, std::span<const std::string> args,
    const std::function<int(const ParsedCommand&)>& run)
{
    const ParsedCommand parsed = spec.parse(args);
    if (parsed.helpRequested()) {
        std::cout << spec.help();
        return exitOk;
    }
    return run(parsed);
}

} // namespace baton::ctl
