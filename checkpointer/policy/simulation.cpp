#include "baton/ckpt/simulation.hpp"

#include <algorithm>

namespace baton::ckpt {

double SyntheticJob::noise()
{
    // xorshift64: deterministic and cheap; uniform in [-1, 1).
    random_ ^= random_ << 13;
    random_ ^= random_ >> 7;
    random_ ^= random_ << 17;
    return static_cast<double>(random_ >> 11) / static_cast<double>(std::uint64_t { 1 } << 52) - 1.0;
}

SyntheticJob::Step SyntheticJob::step(bool startCheckpoint)
{
    if (startCheckpoint) {
        if (inFlight()) {
            ++refused_;
        } else {
            snapshotLeft_ = options_.snapshotSeconds * interference_.snapshot;
            persistLeft_ = options_.persistSeconds * interference_.persist;
            running_ = { snapshotLeft_, persistLeft_, 0 };
        }
    }
    Step step;
    const bool wasInFlight = inFlight();
    const double compute
        = options_.computeSeconds * interference_.compute * (1.0 + options_.jitter * noise());
    const double update = options_.updateSeconds * interference_.compute;
    step.idealSeconds = compute + update;
    // The update waits for the snapshot, which overlapped the forward and backward pass.
    const double stall = std::max(0.0, snapshotLeft_ - compute);
    const double base = compute + stall + update;
    const double afterSnapshot = base - std::min(snapshotLeft_, base);
    snapshotLeft_ = 0;
    const double overlap = std::min(persistLeft_, afterSnapshot);
    persistLeft_ -= overlap;
    step.seconds = base + overlap * options_.persistSlowdown;
    now_ += step.seconds;
    if (wasInFlight && !inFlight()) {
        step.committed = true;
        step.timings = running_;
    }
    return step;
}

double runSynthetic(Policy& policy, SyntheticJob& job, std::uint64_t iterations, std::uint64_t skip)
{
    double actual = 0;
    double ideal = 0;
    for (std::uint64_t i = 0; i < iterations; ++i) {
        const SyntheticJob::Step step = job.step(job.startAtNextStep);
        if (step.committed)
            policy.checkpointCommitted(step.timings);
        job.startAtNextStep = policy.onIteration(step.seconds).checkpoint;
        if (i >= skip) {
            actual += step.seconds;
            ideal += step.idealSeconds;
        }
    }
    return ideal > 0 ? (actual - ideal) / ideal * 100.0 : 0.0;
}

double runFixedInterval(SyntheticJob& job, std::uint64_t k, std::uint64_t iterations, std::uint64_t skip)
{
    double actual = 0;
    double ideal = 0;
    for (std::uint64_t i = 0; i < iterations; ++i) {
        const SyntheticJob::Step step = job.step(i % k == 0);
        if (i >= skip) {
            actual += step.seconds;
            ideal += step.idealSeconds;
        }
    }
    return ideal > 0 ? (actual - ideal) / ideal * 100.0 : 0.0;
}

} // namespace baton::ckpt
