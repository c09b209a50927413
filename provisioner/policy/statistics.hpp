// Summary statistics shared by the predictor's calibration and the replay's validation.
#pragma once

#include <vector>

namespace baton::sim {

// The q-quantile (0 <= q <= 1) of the values, interpolated linearly between ranks; 0 when empty.
double quantile(std::vector<double> values, double q);
// Pearson's correlation of x and y; 0 when it is undefined (fewer than two pairs, a constant side).
double pearson(const std::vector<double>& x, const std::vector<double>& y);

} // namespace baton::sim
