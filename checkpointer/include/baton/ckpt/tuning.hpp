// Tuning state carried from one job of a chain to the next in the manifest's `tuning` field.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace baton::ckpt {

struct TuningState {
    std::uint64_t interval = 1; // k in use when the checkpoint was taken
    std::uint64_t minimumInterval = 1; // the profiled k (the adaptive rate never goes below it)
    double iterationSeconds = 0; // Ti
    double updateSeconds = 0; // Tw
    double snapshotSeconds = 0;
    double persistSeconds = 0;
    double stallSeconds = 0;
    double overheadPercent = 0; // measured
    double targetPercent = 5;
    std::string snapshotTarget = "host";
};

void to_json(nlohmann::json& json, const TuningState& state);
// Throws std::invalid_argument naming the field when a required field is missing or mistyped.
void from_json(const nlohmann::json& json, TuningState& state);

// A new job re-profiles when its iteration time differs from the previous job's by more than this.
inline constexpr double reprofileTolerance = 0.20;

bool needsReprofile(
    const TuningState& previous, double measuredIterationSeconds, double tolerance = reprofileTolerance);

} // namespace baton::ckpt
