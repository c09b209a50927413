// Queue-state features for predicting how long a job submitted now would wait.
#pragma once

#include "simulator.hpp"

#include <array>
#include <cstdint>

namespace baton::sim {

inline constexpr std::size_t featureCount = 15;
using Features = std::array<float, featureCount>;

// Names in the order of Features, stored with trained models.
extern const std::array<const char*, featureCount> featureNames;

struct JobShape {
    int nodes = 1;
    std::int64_t limit = 48 * 3600;
};

// The state of `sim` at its current time, seen by a job of `shape` submitted now.
Features queueFeatures(const Simulator& sim, const JobShape& shape);

} // namespace baton::sim
