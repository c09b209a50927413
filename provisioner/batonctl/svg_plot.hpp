// A small, dependency-free SVG plot: empirical distribution functions of one quantity per series.
#pragma once

#include <string>
#include <vector>

namespace baton::sim {

struct CdfSeries {
    std::string label;
    std::vector<double> values;
};

// Values are clipped to [xMin, xMax] (the axis says so); each series is a step line of its CDF.
std::string cdfSvg(const std::vector<CdfSeries>& series, const std::string& title, const std::string& xLabel,
    double xMin, double xMax);

} // namespace baton::sim
