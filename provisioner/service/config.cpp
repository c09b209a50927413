#include "config.hpp"

#include "policy/policy.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace baton::service {

namespace {

using Json = nlohmann::json;

std::string expectString(const Json& value, const std::string& key)
{
    if (!value.is_string())
        throw ConfigError(key + ": expected a string");
    return value.get<std::string>();
}

std::int64_t expectInteger(const Json& value, const std::string& key, std::int64_t min, std::int64_t max)
{
    if (!value.is_number_integer())
        throw ConfigError(key + ": expected an integer");
    const auto number = value.get<std::int64_t>();
    if (number < min || number > max)
        throw ConfigError(key + ": " + std::to_string(number) + " is outside " + std::to_string(min) + ".."
            + std::to_string(max));
    return number;
}

double expectNumber(const Json& value, const std::string& key, double min, double max)
{
    if (!value.is_number())
        throw ConfigError(key + ": expected a number");
    const double number = value.get<double>();
    if (!(number >= min && number <= max))
        throw ConfigError(key + ": outside " + std::to_string(min) + ".." + std::to_string(max));
    return number;
}

LogLevel parseLogLevel(const std::string& text, const std::string& key)
{
    static const std::map<std::string, LogLevel> levels { { "error", LogLevel::Error },
        { "warning", LogLevel::Warning }, { "info", LogLevel::Info }, { "debug", LogLevel::Debug } };
    const auto found = levels.find(text);
    if (found == levels.end())
        throw ConfigError(key + ": '" + text + "' is not one of error, warning, info, debug");
    return found->second;
}

std::string parsePolicy(const std::string& text, const std::string& key)
{
    if (!sim::isLivePolicy(text))
        throw ConfigError(key + ": '" + text + "' is not one of " + sim::livePolicyList());
    return text;
}

using Setter = std::function<void(ServiceConfig&, const Json&, const std::string&)>;

// Setters for the common kinds of key: a string, a whole number in a range, seconds in a range.
Setter text(std::string ServiceConfig::*field)
{
    return [field](ServiceConfig& c, const Json& v, const std::string& k) { c.*field = expectString(v, k); };
}

Setter whole(int ServiceConfig::*field, std::int64_t min, std::int64_t max)
{
    return [=](ServiceConfig& c, const Json& v, const std::string& k) {
        c.*field = static_cast<int>(expectInteger(v, k, min, max));
    };
}

Setter seconds(std::chrono::seconds ServiceConfig::*field, std::int64_t min, std::int64_t max)
{
    return [=](ServiceConfig& c, const Json& v, const std::string& k) {
        c.*field = std::chrono::seconds(expectInteger(v, k, min, max));
    };
}

// Every key of the file, with its validation. Flags map onto the same table.
const std::map<std::string, Setter>& keyTable()
{
    static const std::map<std::string, Setter> table {
        { "listen_address", text(&ServiceConfig::listenAddress) },
        { "listen_port", whole(&ServiceConfig::listenPort, 0, 65535) },
        { "database", text(&ServiceConfig::database) },
        { "instance_name", text(&ServiceConfig::instanceName) },
        { "tick_seconds",
            [](auto& c, const Json& v, const auto& k) {
                c.tick = std::chrono::milliseconds(
                    static_cast<std::int64_t>(expectNumber(v, k, 0.1, 3600) * 1000));
            } },
        { "policy",
            [](auto& c, const Json& v, const auto& k) { c.policy = parsePolicy(expectString(v, k), k); } },
        { "model", text(&ServiceConfig::modelName) },
        { "quantile",
            [](auto& c, const Json& v, const auto& k) { c.quantile = expectNumber(v, k, 0.01, 0.99); } },
        { "operators_group", text(&ServiceConfig::operatorsGroup) },
        { "slurm_users",
            [](auto& c, const Json& v, const auto& k) {
                if (!v.is_array())
                    throw ConfigError(k + ": expected an array of user names");
                c.slurmUsers.clear();
                for (const auto& name : v)
                    c.slurmUsers.push_back(expectString(name, k));
            } },
        { "submit_lead_seconds", seconds(&ServiceConfig::submitLead, 0, 86400) },
        { "successors_in_flight", whole(&ServiceConfig::successorsInFlight, 1, 2) },
        { "retry_budget", whole(&ServiceConfig::retryBudget, 0, 100) },
        { "handover_timeout_seconds", seconds(&ServiceConfig::handoverTimeout, 10, 86400) },
        { "handover_signal_delay_seconds", seconds(&ServiceConfig::handoverSignalDelay, 0, 3600) },
        { "slurm_timeout_seconds", seconds(&ServiceConfig::slurmTimeout, 1, 600) },
        { "submit_grace_seconds", seconds(&ServiceConfig::submitGrace, 5, 3600) },
        { "max_live_chains_per_user", whole(&ServiceConfig::maxLiveChainsPerUser, 0, 1000000) },
        { "retention_days", whole(&ServiceConfig::retentionDays, 0, 36500) },
        { "max_body_bytes",
            [](auto& c, const Json& v, const auto& k) {
                c.maxBodyBytes = static_cast<std::size_t>(expectInteger(v, k, 1024, 16 << 20));
            } },
        { "max_json_depth", whole(&ServiceConfig::maxJsonDepth, 2, 64) },
        { "http_threads", whole(&ServiceConfig::httpThreads, 1, 256) },
        { "metrics_token", text(&ServiceConfig::metricsToken) },
        { "munge_socket", text(&ServiceConfig::mungeSocket) },
        { "sbatch", text(&ServiceConfig::sbatch) },
        { "squeue", text(&ServiceConfig::squeue) },
        { "scancel", text(&ServiceConfig::scancel) },
        { "scontrol", text(&ServiceConfig::scontrol) },
        { "cluster_nodes",
            [](auto& c, const Json& v, const auto& k) {
                c.clusterNodes = static_cast<int>(expectInteger(v, k, 1, 1 << 20));
            } },
        { "log_level",
            [](auto& c, const Json& v, const auto& k) {
                c.logLevel = parseLogLevel(expectString(v, k), k);
            } },
    };
    return table;
}

void apply(ServiceConfig& config, const std::string& key, const Json& value, const std::string& where)
{
    const auto found = keyTable().find(key);
    if (found == keyTable().end()) {
        std::string known;
        for (const auto& [name, setter] : keyTable())
            known += (known.empty() ? "" : ", ") + name;
        throw ConfigError(where + "unknown key '" + key + "' (known: " + known + ")");
    }
    try {
        found->second(config, value, key);
    } catch (const ConfigError& error) {
        throw ConfigError(where + error.what());
    }
}

// A flag's text as the JSON value its key expects: numbers stay numbers, lists split at commas.
Json flagValue(const std::string& key, const std::string& text)
{
    if (key == "slurm_users") {
        Json list = Json::array();
        std::stringstream parts(text);
        for (std::string part; std::getline(parts, part, ',');)
            if (!part.empty())
                list.push_back(part);
        return list;
    }
    const Json probe = Json::parse(text, nullptr, false);
    if (!probe.is_discarded() && probe.is_number())
        return probe;
    return text;
}

} // namespace

ServiceConfig loadConfigFile(const std::filesystem::path& path, ServiceConfig config)
{
    std::ifstream in(path);
    if (!in)
        throw ConfigError("cannot read config file " + path.string());
    Json doc = Json::parse(in, nullptr, false);
    if (doc.is_discarded())
        throw ConfigError(path.string() + ": not valid JSON");
    if (!doc.is_object())
        throw ConfigError(path.string() + ": expected a JSON object of settings");
    for (const auto& [key, value] : doc.items())
        apply(config, key, value, path.string() + ": ");
    checkConsistency(config, path.string() + ": ");
    return config;
}

void checkConsistency(const ServiceConfig& config, const std::string& where)
{
    // An intent is submitted again once it is older than the grace and not in squeue: while the sbatch
    // that recorded it may still run (up to the Slurm timeout), that would submit a second job.
    if (config.submitGrace <= config.slurmTimeout + std::chrono::seconds(5))
        throw ConfigError(where + "submit_grace_seconds (" + std::to_string(config.submitGrace.count())
            + ") must exceed slurm_timeout_seconds (" + std::to_string(config.slurmTimeout.count())
            + ") by more than 5 s, or a slow sbatch is submitted twice");
}

bool applyFlags(ServiceConfig& config, std::span<const std::string> args)
{
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--help" || arg == "-h")
            return false;
        if (arg.rfind("--", 0) != 0)
            throw ConfigError("unexpected argument '" + arg + "'");
        std::string name = arg.substr(2), value;
        if (const auto equals = name.find('='); equals != std::string::npos) {
            value = name.substr(equals + 1);
            name.resize(equals);
        } else {
            if (i + 1 >= args.size())
                throw ConfigError("--" + name + " needs a value");
            value = args[++i];
        }
        if (name == "config") {
            config = loadConfigFile(value, config);
            continue;
        }
        std::string key = name;
        std::replace(key.begin(), key.end(), '-', '_');
        apply(config, key, flagValue(key, value), "--" + name + ": ");
    }
    checkConsistency(config, "");
    return true;
}

std::string flagsHelp()
{
    std::string text = "usage: batond [--config FILE] [--KEY VALUE ...]\n\n"
                       "Every key of the JSON config file is also a flag (underscores may be dashes);\n"
                       "flags override the file when they come after --config. Keys:\n";
    for (const auto& [name, setter] : keyTable())
        text += "  --" + name + "\n";
    return text;
}

} // namespace baton::service
