// Adaptive checkpoint interval: keeps the measured overhead under the target when the job's speed or
// the storage changes, and returns toward the profiled interval when the interference is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace baton::ckpt {

struct AdaptiveOptions {
    double targetPercent = 5.0; // p
    double raiseAim = 0.9; // a raise aims at raiseAim · p, so noise does not push it over again
    double lowerBelow = 0.5; // "well below": every recent cycle under lowerBelow · p
    double lowerAim = 0.8; // a lowering aims at lowerAim · p (between lowerBelow and 1: hysteresis)
    unsigned raiseAfterCycles = 2; // cycles at the current k whose mean exceeds p before raising
    unsigned lowerAfterCycles = 4; // consecutive cycles well below p before lowering
    unsigned window = 4; // cycles averaged for the measured overhead
    std::uint64_t maxInterval = 1'000'000;
};

// One change of k, with the reason; kept in a list and passed to the callback.
struct IntervalChange {
    std::uint64_t cycle = 0; // checkpoints started so far
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    double measuredOverheadPercent = 0;
    std::string reason;
};

// A cycle runs from the start of one checkpoint to the start of the next. Its overhead is
//     (sum of its iteration times − n · Tclean) / (n · Tclean) · 100
// where Tclean is the median of its iterations without a checkpoint in flight (or the last known one).
class AdaptiveInterval {
public:
    // Starts at max(minimum, initial): a job of a chain resumes with the previous job's k.
    AdaptiveInterval(std::uint64_t minimum, double iterationSeconds, AdaptiveOptions options = {},
        std::uint64_t initial = 0);

    void onChange(std::function<void(const IntervalChange&)> callback) { callback_ = std::move(callback); }

    // One finished iteration; `checkpointInFlight` if a checkpoint was in flight during any part of it.
    void recordIteration(double seconds, bool checkpointInFlight);
    // A checkpoint starts: closes the running cycle and may change k. A cycle cut short by an
    // unscheduled checkpoint (signal, deadline) is not measured (`scheduled` false).
    void checkpointStarted(bool scheduled = true);
    // A checkpoint committed after `persistSeconds` of persisting.
    void checkpointCommitted(double persistSeconds);
    // A checkpoint was due while the previous one was still in flight: persist does not fit in k.
    void checkpointDeferred() { deferred_ = true; }

    std::uint64_t interval() const { return interval_; }
    std::uint64_t minimum() const { return minimum_; }
    // Mean overhead of the last cycles at the current k (or the last measured cycle), percent.
    double measuredOverheadPercent() const { return measured_; }
    double cleanIterationSeconds() const { return clean_; }
    std::uint64_t cycles() const { return cycles_; }
    const std::vector<IntervalChange>& changes() const { return changes_; }

    void setMinimum(std::uint64_t minimum);

private:
    void closeCycle();
    void change(std::uint64_t to, std::string reason);
    std::uint64_t persistInterval() const;

    AdaptiveOptions options_;
    std::uint64_t minimum_;
    std::uint64_t interval_;
    double clean_;
    double lastPersist_ = 0;
    double measured_ = 0;
    bool cycleOpen_ = false;
    bool deferred_ = false;
    std::uint64_t cycles_ = 0;
    std::vector<double> cycleTimes_;
    std::vector<double> cycleClean_;
    std::vector<double> atInterval_; // overheads of the cycles measured at the current k
    std::vector<IntervalChange> changes_;
    std::function<void(const IntervalChange&)> callback_;
};

} // namespace baton::ckpt
