#include "baton/ckpt/deadline.hpp"

#include "common/baton_contract.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

namespace baton::ckpt {

Clock systemClock()
{
    return [] {
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        return std::chrono::duration<double>(now).count();
    };
}

namespace {

std::optional<double> parseSeconds(std::string_view name, const char* value, bool allowZero)
{
    if (value == nullptr || *value == '\0')
        return std::nullopt;
    const std::string_view text(value);
    double seconds = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
    if (ec != std::errc {} || end != text.data() + text.size() || !std::isfinite(seconds))
        throw std::invalid_argument(
            std::string(name) + ": '" + std::string(text) + "' is not a number of seconds");
    if (seconds < 0 || (!allowZero && seconds == 0))
        throw std::invalid_argument(std::string(name) + ": '" + std::string(text) + "' must be "
            + (allowZero ? "zero or positive" : "positive"));
    return seconds;
}

} // namespace

std::optional<double> parseDeadline(std::string_view name, const char* value)
{
    return parseSeconds(name, value, false);
}

std::optional<double> parseMargin(std::string_view name, const char* value)
{
    auto seconds = parseSeconds(name, value, true);
    if (seconds && !contract::marginInRange(*seconds))
        throw std::invalid_argument(std::string(name) + ": '" + value + "' is more than "
            + std::to_string(static_cast<long long>(contract::kMarginMax)) + " seconds");
    return seconds;
}

DeadlinePlanner::DeadlinePlanner(Clock clock)
    : clock_(std::move(clock))
{ }

void DeadlinePlanner::setMargin(double seconds)
{
    if (!(seconds >= 0) || !std::isfinite(seconds))
        throw std::invalid_argument("deadline margin must be zero or a positive number of seconds");
    margin_ = seconds;
}

void DeadlinePlanner::setSafetyFactor(double factor)
{
    if (!(factor >= 1) || !std::isfinite(factor))
        throw std::invalid_argument("checkpoint safety factor must be at least 1");
    safety_ = factor;
}

void DeadlinePlanner::setSlack(double seconds)
{
    if (!(seconds >= 0) || !std::isfinite(seconds))
        throw std::invalid_argument("deadline slack must be zero or a positive number of seconds");
    slack_ = seconds;
}

void DeadlinePlanner::observeIteration(double seconds)
{
    // A slow iteration just before the deadline is what hurts: follow increases at once, decreases slowly.
    if (seconds > iteration_)
        iteration_ = seconds;
    else if (seconds >= 0)
        iteration_ = 0.9 * iteration_ + 0.1 * seconds;
}

void DeadlinePlanner::observeCheckpoint(double snapshotSeconds, double persistSeconds)
{
    checkpoint_ = std::max(checkpoint_, std::max(0.0, snapshotSeconds) + std::max(0.0, persistSeconds));
}

double DeadlinePlanner::secondsToCommitBy() const
{
    if (!deadline_)
        return std::numeric_limits<double>::infinity();
    return *deadline_ - margin_ - clock_();
}

bool DeadlinePlanner::finalCheckpointDue(bool checkpointInFlight) const
{
    if (!deadline_ || finalStarted_ || finalCommitted_)
        return false;
    const double checkpoints = checkpointInFlight ? 2.0 : 1.0;
    return secondsToCommitBy() <= iteration_ + safety_ * checkpoint_ * checkpoints + slack_;
}

} // namespace baton::ckpt
