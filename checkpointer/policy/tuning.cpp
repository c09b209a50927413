#include "baton/ckpt/tuning.hpp"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace baton::ckpt {

void to_json(nlohmann::json& json, const TuningState& state)
{
    json = nlohmann::json {
        { "interval", state.interval },
        { "minimum_interval", state.minimumInterval },
        { "iteration_seconds", state.iterationSeconds },
        { "update_seconds", state.updateSeconds },
        { "snapshot_seconds", state.snapshotSeconds },
        { "persist_seconds", state.persistSeconds },
        { "stall_seconds", state.stallSeconds },
        { "overhead_percent", state.overheadPercent },
        { "target_percent", state.targetPercent },
        { "snapshot_target", state.snapshotTarget },
    };
}

namespace {

double number(const nlohmann::json& json, const char* name, bool required, double fallback)
{
    const auto it = json.find(name);
    if (it == json.end()) {
        if (required)
            throw std::invalid_argument(std::string("tuning state: '") + name + "' is missing");
        return fallback;
    }
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
        throw std::invalid_argument(
            std::string("tuning state: '") + name + "' must be a non-negative number");
    return it->get<double>();
}

std::uint64_t count(const nlohmann::json& json, const char* name, bool required, std::uint64_t fallback)
{
    const auto it = json.find(name);
    if (it == json.end()) {
        if (required)
            throw std::invalid_argument(std::string("tuning state: '") + name + "' is missing");
        return fallback;
    }
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() == 0)
        throw std::invalid_argument(std::string("tuning state: '") + name + "' must be a positive integer");
    return it->get<std::uint64_t>();
}

} // namespace

void from_json(const nlohmann::json& json, TuningState& state)
{
    if (!json.is_object())
        throw std::invalid_argument("tuning state must be a JSON object");
    state.interval = count(json, "interval", true, 1);
    state.minimumInterval = count(json, "minimum_interval", false, state.interval);
    state.iterationSeconds = number(json, "iteration_seconds", true, 0);
    if (state.iterationSeconds <= 0)
        throw std::invalid_argument("tuning state: 'iteration_seconds' must be positive");
    state.updateSeconds = number(json, "update_seconds", false, 0);
    state.snapshotSeconds = number(json, "snapshot_seconds", true, 0);
    state.persistSeconds = number(json, "persist_seconds", true, 0);
    state.stallSeconds = number(json, "stall_seconds", true, 0);
    state.overheadPercent = number(json, "overhead_percent", true, 0);
    state.targetPercent = number(json, "target_percent", false, 5);
    const auto target = json.find("snapshot_target");
    if (target != json.end() && !(target->is_string() && (*target == "host" || *target == "device")))
        throw std::invalid_argument("tuning state: 'snapshot_target' must be \"host\" or \"device\"");
    state.snapshotTarget = target == json.end() ? "host" : target->get<std::string>();
}

bool needsReprofile(const TuningState& previous, double measuredIterationSeconds, double tolerance)
{
    if (!(previous.iterationSeconds > 0) || !(measuredIterationSeconds > 0))
        return true;
    return std::abs(measuredIterationSeconds - previous.iterationSeconds) / previous.iterationSeconds
        > tolerance;
}

} // namespace baton::ckpt
