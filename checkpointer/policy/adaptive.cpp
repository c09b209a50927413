#include "baton/ckpt/adaptive.hpp"

#include "baton/ckpt/interval.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <stdexcept>

namespace baton::ckpt {

namespace {

double median(std::vector<double> values)
{
    const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), mid, values.end());
    if (values.size() % 2 == 1)
        return *mid;
    return (*mid + *std::max_element(values.begin(), mid)) / 2;
}

std::string describe(const char* what, double overhead, double bound)
{
    char text[160];
    std::snprintf(text, sizeof text, "%s: measured overhead %.2f%% vs %.2f%%", what, overhead, bound);
    return text;
}

} // namespace

AdaptiveInterval::AdaptiveInterval(
    std::uint64_t minimum, double iterationSeconds, AdaptiveOptions options, std::uint64_t initial)
    : options_(options)
    , minimum_(std::max<std::uint64_t>(1, minimum))
    , interval_(std::clamp<std::uint64_t>(initial, minimum_, std::max(minimum_, options.maxInterval)))
    , clean_(iterationSeconds)
{
    if (!(options_.targetPercent > 0))
        throw std::invalid_argument("overhead target must be a positive percentage");
    if (!(iterationSeconds > 0))
        throw std::invalid_argument("iteration time must be positive");
    if (!(options_.lowerBelow < options_.lowerAim && options_.lowerAim < options_.raiseAim
            && options_.raiseAim <= 1.0))
        throw std::invalid_argument("adaptive options need lowerBelow < lowerAim < raiseAim <= 1");
    options_.window = std::max(1u, options_.window);
    options_.raiseAfterCycles = std::max(1u, options_.raiseAfterCycles);
    options_.lowerAfterCycles = std::max(1u, options_.lowerAfterCycles);
}

void AdaptiveInterval::setMinimum(std::uint64_t minimum)
{
    minimum_ = std::max<std::uint64_t>(1, minimum);
    if (interval_ < minimum_)
        change(minimum_, "profiled minimum raised");
}

void AdaptiveInterval::recordIteration(double seconds, bool checkpointInFlight)
{
    if (!(seconds >= 0))
        return;
    if (!cycleOpen_) {
        // Before the first checkpoint every iteration is clean: it only refines Tclean.
        if (!checkpointInFlight)
            clean_ = 0.8 * clean_ + 0.2 * seconds;
        return;
    }
    cycleTimes_.push_back(seconds);
    if (!checkpointInFlight)
        cycleClean_.push_back(seconds);
}

void AdaptiveInterval::checkpointStarted(bool scheduled)
{
    if (cycleOpen_ && scheduled && !cycleTimes_.empty())
        closeCycle();
    cycleOpen_ = true;
    cycleTimes_.clear();
    cycleClean_.clear();
    deferred_ = false;
}

void AdaptiveInterval::checkpointCommitted(double persistSeconds)
{
    if (persistSeconds >= 0)
        lastPersist_ = persistSeconds;
}

std::uint64_t AdaptiveInterval::persistInterval() const
{
    return smallestIntervalWithin(lastPersist_ / clean_, 1.0);
}

void AdaptiveInterval::closeCycle()
{
    ++cycles_;
    if (cycleClean_.size() >= 3)
        clean_ = median(cycleClean_);
    const double n = static_cast<double>(cycleTimes_.size());
    const double total = std::accumulate(cycleTimes_.begin(), cycleTimes_.end(), 0.0);
    const double overhead = std::max(0.0, (total - n * clean_) / (n * clean_) * 100.0);
    atInterval_.push_back(overhead);
    if (atInterval_.size() > options_.window)
        atInterval_.erase(atInterval_.begin());
    measured_ = std::accumulate(atInterval_.begin(), atInterval_.end(), 0.0)
        / static_cast<double>(atInterval_.size());

    const double p = options_.targetPercent;
    const std::uint64_t k = interval_;
    const double kd = static_cast<double>(k);
    if (deferred_) {
        const std::uint64_t to = std::max(k + 1, persistInterval());
        char text[160];
        std::snprintf(text, sizeof text, "persist (%.3f s) did not finish within k iterations (%.3f s)",
            lastPersist_, kd * clean_);
        change(to, text);
        return;
    }
    const bool sustained = atInterval_.size() >= options_.raiseAfterCycles && measured_ > p;
    const bool severe = overhead > 2 * p;
    if (sustained || severe) {
        // Overhead scales as 1/k: k' = k · measured / (aim · p).
        const double seen = severe && !sustained ? overhead : measured_;
        const std::uint64_t to = std::max(k + 1, smallestIntervalWithin(kd * seen, options_.raiseAim * p));
        change(to, describe("raise", seen, p));
        return;
    }
    if (k > minimum_ && atInterval_.size() >= options_.lowerAfterCycles) {
        const auto recent = atInterval_.end() - options_.lowerAfterCycles;
        const bool allLow
            = std::all_of(recent, atInterval_.end(), [&](double o) { return o < options_.lowerBelow * p; });
        if (allLow) {
            std::uint64_t to = smallestIntervalWithin(kd * measured_, options_.lowerAim * p);
            to = std::max({ to, minimum_, persistInterval() });
            if (to < k)
                change(to, describe("lower", measured_, options_.lowerBelow * p));
        }
    }
}

void AdaptiveInterval::change(std::uint64_t to, std::string reason)
{
    to = std::clamp<std::uint64_t>(to, 1, options_.maxInterval);
    if (to == interval_)
        return;
    IntervalChange record { cycles_, interval_, to, measured_, std::move(reason) };
    interval_ = to;
    atInterval_.clear();
    changes_.push_back(record);
    if (callback_)
        callback_(changes_.back());
}

} // namespace baton::ckpt
