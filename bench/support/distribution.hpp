// What the benchmarks print: every figure a distribution over repeated runs (median and range), and
// the steady clock's seconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace baton::bench {

inline double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Values of one figure over the runs.
class Distribution {
public:
    void add(double value) { values_.push_back(value); }
    bool empty() const { return values_.empty(); }
    double median() const
    {
        if (values_.empty())
            return 0;
        auto sorted = values_;
        std::sort(sorted.begin(), sorted.end());
        std::size_t n = sorted.size();
        return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
    double min() const { return values_.empty() ? 0 : *std::min_element(values_.begin(), values_.end()); }
    double max() const { return values_.empty() ? 0 : *std::max_element(values_.begin(), values_.end()); }
    // "median (min-max)", each value times `scale` with `precision` decimals.
    std::string text(int precision = 3, double scale = 1) const
    {
        char out[96];
        std::snprintf(out, sizeof out, "%.*f (%.*f-%.*f)", precision, median() * scale, precision,
            min() * scale, precision, max() * scale);
        return out;
    }

private:
    std::vector<double> values_;
};

} // namespace baton::bench
