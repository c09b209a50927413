// A small command-line parser: positional arguments and --name VALUE / --name=VALUE options, each
// declared up front so that an unknown or incomplete option is a usage error.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace baton::ctl {

struct OptionSpec {
    std::string_view name; // without the leading dashes
    bool takesValue;
};

class Options {
public:
    // Throws UsageError for unknown options or a missing value.
    Options(std::span<const std::string> args, std::initializer_list<OptionSpec> specs);

    const std::vector<std::string>& positional() const { return positional_; }
    std::optional<std::string> value(std::string_view name) const;
    bool flag(std::string_view name) const { return values_.count(std::string(name)) > 0; }
    // Throws UsageError unless there are between min and max positional arguments.
    void expectPositional(std::size_t min, std::size_t max, std::string_view usage) const;

private:
    std::vector<std::string> positional_;
    std::map<std::string, std::string> values_;
};

// The database to use: --database, else $BATON_DATABASE, else libpq's PG* environment.
std::string databaseConninfo(const Options& options);

} // namespace baton::ctl
