#include "baton/ckpt/adaptive.hpp"

#include "baton/ckpt/interval.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

namespace baton::ckpt {

namespace {

constexpr double speedChange = 0.2;

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
    if (!(options_.lowerBelow > 0 && options_.lowerBelow < options_.aim && options_.aim <= 1.0))
        throw std::invalid_argument("adaptive options need 0 < lowerBelow < aim <= 1");
    if (!(options_.confidence >= 0))
        throw std::invalid_argument("adaptive options need a non-negative confidence");
    options_.window = std::max(2u, options_.window);
    options_.raiseAfterCycles = std::clamp(options_.raiseAfterCycles, 1u, options_.window);
    options_.lowerAfterCycles = std::clamp(options_.lowerAfterCycles, 1u, options_.window);
    options_.baselineCycles = std::max(1u, options_.baselineCycles);
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
    ++cycleIterations_;
    if (checkpointInFlight) {
        cycleInFlight_.push_back(seconds);
    } else {
        cycleClean_.seconds += seconds;
        ++cycleClean_.count;
    }
}

void AdaptiveInterval::checkpointStarted(bool scheduled)
{
    if (cycleOpen_ && scheduled && cycleIterations_ > 0)
        closeCycle();
    cycleOpen_ = true;
    cycleIterations_ = 0;
    cycleInFlight_.clear();
    cycleClean_ = {};
    deferred_ = false;
}

void AdaptiveInterval::checkpointCommitted(double checkpointSeconds)
{
    if (checkpointSeconds >= 0)
        lastCheckpoint_ = checkpointSeconds;
}

std::uint64_t AdaptiveInterval::checkpointInterval() const
{
    return smallestIntervalWithin(lastCheckpoint_ / clean_, 1.0);
}

void AdaptiveInterval::closeCycle()
{
    ++cycles_;
    if (cycleClean_.count >= 3) {
        // The job's speed changed (another job on the device, a different node): measurements taken at
        // the old speed say nothing about the new one.
        const double mean = cycleClean_.seconds / static_cast<double>(cycleClean_.count);
        if (std::abs(mean - clean_) > speedChange * clean_) {
            cleanHistory_.clear();
            atInterval_.clear();
        }
    }
    cleanHistory_.push_back(cycleClean_);
    if (cleanHistory_.size() > options_.baselineCycles)
        cleanHistory_.pop_front();
    CleanSum clean;
    for (const CleanSum& sum : cleanHistory_) {
        clean.seconds += sum.seconds;
        clean.count += sum.count;
    }
    if (clean.count >= 3)
        clean_ = clean.seconds / static_cast<double>(clean.count);
    double excess = 0;
    for (double seconds : cycleInFlight_)
        excess += seconds - clean_;
    // Not clipped at 0: noise must average out, not bias the mean upward.
    decide(excess / (static_cast<double>(cycleIterations_) * clean_) * 100.0);
}

void AdaptiveInterval::decide(double overhead)
{
    atInterval_.push_back(overhead);
    if (atInterval_.size() > options_.window)
        atInterval_.erase(atInterval_.begin());
    const double count = static_cast<double>(atInterval_.size());
    measured_ = std::accumulate(atInterval_.begin(), atInterval_.end(), 0.0) / count;
    double spread = 0;
    for (double o : atInterval_)
        spread += (o - measured_) * (o - measured_);
    const double error = count > 1 ? options_.confidence * std::sqrt(spread / (count - 1) / count) : 0;

    const double p = options_.targetPercent;
    const std::uint64_t k = interval_;
    const double kd = static_cast<double>(k);
    if (deferred_) {
        char text[160];
        std::snprintf(text, sizeof text, "checkpoint (%.3f s) did not finish within k iterations (%.3f s)",
            lastCheckpoint_, kd * clean_);
        change(std::max(k + 1, checkpointInterval()), text);
        return;
    }
    const std::uint64_t aimed = smallestIntervalWithin(kd * std::max(0.0, measured_), options_.aim * p);
    if (atInterval_.size() >= options_.raiseAfterCycles && measured_ - error > p) {
        change(std::max(k + 1, aimed), describe("raise", measured_, p));
        return;
    }
    if (k > minimum_ && atInterval_.size() >= options_.lowerAfterCycles
        && measured_ + error < options_.lowerBelow * p) {
        const std::uint64_t to = std::max({ aimed, minimum_, checkpointInterval() });
        if (to < k)
            change(to, describe("lower", measured_, options_.lowerBelow * p));
    }
}

void AdaptiveInterval::change(std::uint64_t to, std::string reason)
{
    to = std::clamp<std::uint64_t>(to, 1, options_.maxInterval);
    if (to == interval_)
        return;
    IntervalChange record { cycles_, interval_, to, measuredOverheadPercent(), std::move(reason) };
    interval_ = to;
    atInterval_.clear();
    changes_.push_back(record);
    if (callback_)
        callback_(changes_.back());
}

} // namespace baton::ckpt
