#include "baton/ckpt/interval.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace baton::ckpt {

const char* toString(SnapshotTarget target)
{
    return target == SnapshotTarget::Device ? "device" : "host";
}

SnapshotTarget chooseSnapshotTarget(const Profile& profile, double safetyFraction)
{
    if (profile.deviceTotalBytes == 0 || profile.devicePeakBytes >= profile.deviceTotalBytes)
        return SnapshotTarget::Host;
    const double spare = static_cast<double>(profile.deviceTotalBytes - profile.devicePeakBytes);
    const double needed = static_cast<double>(profile.checkpointBytes)
        + safetyFraction * static_cast<double>(profile.deviceTotalBytes);
    return needed <= spare ? SnapshotTarget::Device : SnapshotTarget::Host;
}

double snapshotSeconds(const Profile& profile, SnapshotTarget target)
{
    return target == SnapshotTarget::Device ? profile.gpuSnapshotSeconds : profile.hostSnapshotSeconds;
}

double stallSeconds(const Profile& profile, SnapshotTarget target)
{
    if (profile.stallSeconds >= 0)
        return profile.stallSeconds;
    const double overlap = std::max(0.0, profile.iterationSeconds - profile.updateSeconds);
    return std::max(0.0, snapshotSeconds(profile, target) - overlap);
}

double overheadPercent(double stall, std::uint64_t k, double iterationSeconds)
{
    if (k == 0 || iterationSeconds <= 0)
        return std::numeric_limits<double>::infinity();
    return stall / (static_cast<double>(k) * iterationSeconds) * 100.0;
}

std::uint64_t smallestIntervalWithin(double value, double limit)
{
    if (value <= 0)
        return 1;
    const double ratio = value / limit;
    if (!(ratio < 1e15))
        throw std::invalid_argument("checkpoint interval would exceed 1e15 iterations");
    auto k = static_cast<std::uint64_t>(std::max(1.0, std::ceil(ratio)));
    // ceil of a rounded quotient can be one off either way; settle it on the exact condition.
    while (k > 1 && value / static_cast<double>(k - 1) <= limit)
        --k;
    while (value / static_cast<double>(k) > limit)
        ++k;
    return k;
}

IntervalChoice chooseInterval(const Profile& profile, double targetPercent, double safetyFraction)
{
    if (!(profile.iterationSeconds > 0))
        throw std::invalid_argument("profile: iteration time must be positive");
    if (!(targetPercent > 0))
        throw std::invalid_argument("overhead target must be a positive percentage");
    if (profile.updateSeconds < 0 || profile.gpuSnapshotSeconds < 0 || profile.hostSnapshotSeconds < 0
        || profile.persistSeconds < 0)
        throw std::invalid_argument("profile: times must not be negative");

    IntervalChoice choice;
    choice.target = chooseSnapshotTarget(profile, safetyFraction);
    choice.stallSeconds = stallSeconds(profile, choice.target);
    const double ti = profile.iterationSeconds;
    // (a) stall / (k · Ti) · 100 <= p   <=>   (100 · stall / Ti) / k <= p
    const std::uint64_t forOverhead = smallestIntervalWithin(100.0 * choice.stallSeconds / ti, targetPercent);
    // (b) Tsnap + Ts <= k · Ti   <=>   ((Tsnap + Ts) / Ti) / k <= 1: the persist starts once the snapshot
    // is done, and both must be over before the next checkpoint starts.
    const double checkpoint = snapshotSeconds(profile, choice.target) + profile.persistSeconds;
    const std::uint64_t forPersist = smallestIntervalWithin(checkpoint / ti, 1.0);
    if (forPersist > forOverhead) {
        choice.interval = forPersist;
        choice.reason = "persist must finish within k iterations";
    } else {
        choice.interval = forOverhead;
        choice.reason
            = forOverhead > 1 ? "stall amortised within the overhead target" : "every iteration fits";
    }
    choice.overheadPercent = overheadPercent(choice.stallSeconds, choice.interval, ti);
    return choice;
}

} // namespace baton::ckpt
