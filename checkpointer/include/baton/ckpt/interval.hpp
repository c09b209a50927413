// The profiled checkpoint interval (CheckFreq): where to snapshot and every how many iterations.
#pragma once

#include <cstdint>
#include <string>

namespace baton::ckpt {

// What the first iterations measured. Times in seconds, sizes in bytes.
struct Profile {
    double iterationSeconds = 0; // Ti: one training iteration without a checkpoint in flight
    double updateSeconds = 0; // Tw: the weight update at the end of an iteration
    double gpuSnapshotSeconds = 0; // Tg: copy of the state into spare device memory
    double hostSnapshotSeconds = 0; // Tc: copy of the state into pinned host memory
    double persistSeconds = 0; // Ts: write of the copy to storage
    std::uint64_t checkpointBytes = 0; // m
    std::uint64_t devicePeakBytes = 0; // M: peak device memory used by training
    std::uint64_t deviceTotalBytes = 0; // Mmax: 0 when there is no device
    // Measured training time lost per checkpoint (snapshot stall plus persist interference). A negative
    // value means "not measured": the stall is then estimated from the overlap model below.
    double stallSeconds = -1;
};

enum class SnapshotTarget { Host, Device };

const char* toString(SnapshotTarget target);

// Spare device memory kept free on top of the snapshot, as a fraction of Mmax.
inline constexpr double defaultDeviceSafetyFraction = 0.10;

// Device when m + safety·Mmax <= Mmax − M, else host.
SnapshotTarget chooseSnapshotTarget(
    const Profile& profile, double safetyFraction = defaultDeviceSafetyFraction);

// Seconds the chosen snapshot takes (Tg or Tc).
double snapshotSeconds(const Profile& profile, SnapshotTarget target);

// Stall per checkpoint: the measured one, or max(0, Tsnap − (Ti − Tw)) — the snapshot overlaps the
// next iteration's forward and backward pass, which take Ti − Tw, and the update waits for the rest.
double stallSeconds(const Profile& profile, SnapshotTarget target);

// Overhead in percent when a stall of `stall` seconds is paid once every k iterations of Ti seconds:
// stall / (k · Ti) · 100. (CheckFreq computes o/k*t*100, i.e. (o/k)·t·100, which is wrong.)
double overheadPercent(double stall, std::uint64_t k, double iterationSeconds);

struct IntervalChoice {
    std::uint64_t interval = 1; // k
    SnapshotTarget target = SnapshotTarget::Host;
    double stallSeconds = 0;
    double overheadPercent = 0; // expected overhead at k
    std::string reason; // which condition set k
};

// The smallest k >= 1 with (a) stall / (k · Ti) · 100 <= p and (b) Tsnap + Ts <= k · Ti (one checkpoint,
// snapshot then persist, ends before the next one starts, so checkpoints never queue):
//     k = max(1, ceil(100 · stall / (p · Ti)), ceil((Tsnap + Ts) / Ti))
// Throws std::invalid_argument when Ti <= 0 or p <= 0 or a time is negative.
IntervalChoice chooseInterval(
    const Profile& profile, double targetPercent, double safetyFraction = defaultDeviceSafetyFraction);

// Smallest k >= 1 with value / k <= limit, robust to rounding (value, limit > 0).
std::uint64_t smallestIntervalWithin(double value, double limit);

} // namespace baton::ckpt
