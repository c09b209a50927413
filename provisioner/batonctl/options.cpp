#include "options.hpp"

#include "command.hpp"

#include <cstdlib>

namespace baton::ctl {

Options::Options(std::span<const std::string> args, std::initializer_list<OptionSpec> specs)
{
    bool onlyPositional = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (onlyPositional || arg.size() < 2 || arg.rfind("--", 0) != 0) {
            if (!onlyPositional && arg.size() > 1 && arg[0] == '-')
                throw UsageError("unknown option " + arg);
            positional_.push_back(arg);
            continue;
        }
        if (arg == "--") {
            onlyPositional = true;
            continue;
        }
        std::string name = arg.substr(2);
        std::optional<std::string> inlineValue;
        if (auto eq = name.find('='); eq != std::string::npos) {
            inlineValue = name.substr(eq + 1);
            name.resize(eq);
        }
        const OptionSpec* spec = nullptr;
        for (const auto& candidate : specs)
            if (candidate.name == name)
                spec = &candidate;
        if (!spec)
            throw UsageError("unknown option --" + name);
        if (!spec->takesValue) {
            if (inlineValue)
                throw UsageError("option --" + name + " takes no value");
            values_[name] = "";
        } else if (inlineValue) {
            values_[name] = *inlineValue;
        } else {
            if (i + 1 >= args.size())
                throw UsageError("option --" + name + " needs a value");
            values_[name] = args[++i];
        }
    }
}

std::optional<std::string> Options::value(std::string_view name) const
{
    auto it = values_.find(std::string(name));
    if (it == values_.end())
        return std::nullopt;
    return it->second;
}

void Options::expectPositional(std::size_t min, std::size_t max, std::string_view usage) const
{
    if (positional_.size() < min || positional_.size() > max)
        throw UsageError("usage: " + std::string(usage));
}

std::string databaseConninfo(const Options& options)
{
    if (auto database = options.value("database"))
        return *database;
    if (const char* env = std::getenv("BATON_DATABASE"); env && *env)
        return env;
    return {};
}

} // namespace baton::ctl
