// Adaptive checkpoint interval: keeps the measured overhead under the target when the job's speed or
// the storage changes, and returns toward the profiled interval when the interference is gone.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace baton::ckpt {

struct AdaptiveOptions {
    double targetPercent = 5.0; // p
    // Hysteresis: k rises when the overhead is clearly above p and falls when it is clearly below
    // lowerBelow · p; both moves aim at aim · p, inside that band, so the next measurements keep it.
    double aim = 0.9;
    double lowerBelow = 0.75;
    double confidence = 3.0; // "clearly": by this many standard errors of the mean
    unsigned raiseAfterCycles = 3; // cycles at the current k before a raise
    unsigned lowerAfterCycles = 4; // cycles at the current k before a lowering
    unsigned window = 8; // recent cycles averaged for the measured overhead
    unsigned baselineCycles = 4; // cycles whose clean iterations give Tclean
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

// A cycle runs from the start of one checkpoint to the start of the next (n iterations). Its overhead
//     sum over its iterations with a checkpoint in flight of (t − Tclean) / (n · Tclean) · 100
// where Tclean is the mean time of the iterations without a checkpoint in flight in the last few
// cycles. Iterations without a checkpoint in flight add nothing but noise, so they are left out.
// Overhead scales as 1/k, so a move goes straight to k' = k · measured / (aim · p).
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
    // A checkpoint committed `checkpointSeconds` (snapshot + persist) after it started.
    void checkpointCommitted(double checkpointSeconds);
    // A checkpoint was due while the previous one was still in flight: it does not fit in k iterations.
    void checkpointDeferred() { deferred_ = true; }

    std::uint64_t interval() const { return interval_; }
    std::uint64_t minimum() const { return minimum_; }
    // Mean overhead of the recent cycles at the current k (or the last measured cycle), percent.
    double measuredOverheadPercent() const { return measured_ > 0 ? measured_ : 0; }
    double cleanIterationSeconds() const { return clean_; }
    std::uint64_t cycles() const { return cycles_; }
    const std::vector<IntervalChange>& changes() const { return changes_; }

    void setMinimum(std::uint64_t minimum);

private:
    struct CleanSum {
        double seconds = 0;
        std::uint64_t count = 0;
    };

    void closeCycle();
    void decide(double overhead);
    void change(std::uint64_t to, std::string reason);
    std::uint64_t checkpointInterval() const;

    AdaptiveOptions options_;
    std::uint64_t minimum_;
    std::uint64_t interval_;
    double clean_;
    double lastCheckpoint_ = 0;
    double measured_ = 0;
    bool cycleOpen_ = false;
    bool deferred_ = false;
    std::uint64_t cycles_ = 0;
    std::uint64_t cycleIterations_ = 0;
    std::vector<double> cycleInFlight_;
    CleanSum cycleClean_;
    std::deque<CleanSum> cleanHistory_;
    std::vector<double> atInterval_; // overheads of the recent cycles measured at the current k
    std::vector<IntervalChange> changes_;
    std::function<void(const IntervalChange&)> callback_;
};

} // namespace baton::ckpt
