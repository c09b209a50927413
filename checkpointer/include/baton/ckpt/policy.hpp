// The checkpoint policy: called once per iteration, it answers "checkpoint now?" and "should exit?".
// It profiles the first iterations, picks the interval k (interval.hpp), adapts it (adaptive.hpp),
// plans the final checkpoint before a deadline (deadline.hpp) and reacts to signals (signals.hpp).
#pragma once

#include "baton/ckpt/adaptive.hpp"
#include "baton/ckpt/deadline.hpp"
#include "baton/ckpt/interval.hpp"
#include "baton/ckpt/signals.hpp"
#include "baton/ckpt/tuning.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace baton::ckpt {

struct PolicyOptions {
    double targetPercent = 5.0; // p, BATON_OVERHEAD
    unsigned profileIterations = 5; // clean iterations timed before the profiling checkpoint
    std::optional<double> deadline; // epoch seconds, BATON_DEADLINE
    double deadlineMargin = defaultDeadlineMargin; // BATON_DEADLINE_MARGIN
    double safetyFactor = defaultCheckpointSafetyFactor;
    double deadlineSlack = defaultDeadlineSlack; // seconds of extra lead for the final checkpoint
    double deviceSafetyFraction = defaultDeviceSafetyFraction;
    std::optional<TuningState> previous; // the previous job's tuning, from the last manifest
    AdaptiveOptions adaptive; // its targetPercent is taken from targetPercent
};

// Reads BATON_OVERHEAD, BATON_DEADLINE and BATON_DEADLINE_MARGIN through `lookup` (getenv by default)
// over `options`. A malformed value, or one outside the contract's range (docs/contracts.md: overhead
// greater than 0 and less than 100, margin 0..86400), throws std::invalid_argument naming the variable.
using EnvironmentLookup = std::function<const char*(const char*)>;
PolicyOptions applyEnvironment(PolicyOptions options, const EnvironmentLookup& lookup = {});

// Finish: the session's closing checkpoint after markTrainingDone() (not a policy decision).
enum class CheckpointReason { None, Profile, Interval, Signal, Terminate, Deadline, Requested, Finish };
const char* toString(CheckpointReason reason);

struct Decision {
    bool checkpoint = false; // start a checkpoint at this boundary
    bool final = false; // shouldExit() turns true once it commits
    CheckpointReason reason = CheckpointReason::None;
};

struct CheckpointTimings {
    double snapshotSeconds = 0;
    double persistSeconds = 0;
    std::uint64_t bytes = 0;
    // Two-level storage: the last drain to the chain directory, which a final checkpoint waits for.
    double drainSeconds = 0;
};

class Policy {
public:
    explicit Policy(PolicyOptions options = {}, Clock clock = systemClock());
    ~Policy();
    Policy(const Policy&) = delete;
    Policy& operator=(const Policy&) = delete;

    void onLog(std::function<void(const std::string&)> log) { log_ = std::move(log); }

    // Inputs known before the first checkpoint: the snapshot size and, with a device, its memory.
    void setCheckpointBytes(std::uint64_t bytes) { profile_.checkpointBytes = bytes; }
    void setDeviceMemory(std::uint64_t peakBytes, std::uint64_t totalBytes);
    SnapshotTarget snapshotTarget() const;

    void setDeadline(std::optional<double> deadline) { planner_.setDeadline(deadline); }
    // The previous job's tuning (from the restored manifest); effective while the policy still profiles.
    void setPrevious(const TuningState& previous) { options_.previous = previous; }
    // Opt-in SIGUSR1/SIGTERM handlers, restored when the policy goes away or disableSignals() is called.
    void enableSignals(bool usr1 = true, bool term = true);
    void disableSignals();
    // Ask for a checkpoint at the next boundary (and exit after it when `exitAfter`).
    void requestCheckpoint(bool exitAfter)
    {
        requested_ = true;
        requestedExit_ = requestedExit_ || exitAfter;
    }

    // Called at each iteration boundary (after the weight update) with the iteration's wall time and,
    // if known, the weight-update part of it. If the decision says so, the caller starts a checkpoint.
    Decision onIteration(double iterationSeconds, double updateSeconds = -1);
    // Same, timing the iteration with the clock since the previous tick (or construction).
    Decision tick();

    // Reports from the checkpointer about the checkpoint the last decision started.
    void checkpointCommitted(const CheckpointTimings& timings);
    void checkpointFailed(const std::string& why);

    bool shouldExit() const { return exit_; }
    bool profiling() const { return !adaptive_; }
    bool checkpointInFlight() const { return inFlight_; }
    std::uint64_t interval() const;
    double measuredOverheadPercent() const { return adaptive_ ? adaptive_->measuredOverheadPercent() : 0; }
    std::uint64_t iterations() const { return iterations_; }
    const Profile& profile() const { return profile_; }
    std::vector<IntervalChange> changes() const;
    TuningState tuning() const;
    const DeadlinePlanner& planner() const { return planner_; }

private:
    void log(const std::string& message) const;
    void finishProfile();
    void startAdaptive(std::uint64_t interval, std::uint64_t minimum);
    Decision start(CheckpointReason reason, bool final);

    PolicyOptions options_;
    Clock clock_;
    double lastTick_;
    Profile profile_;
    DeadlinePlanner planner_;
    std::unique_ptr<AdaptiveInterval> adaptive_;
    std::unique_ptr<SignalHandlers> signals_;
    std::function<void(const std::string&)> log_;

    std::vector<double> cleanTimes_; // profiling: clean iteration times
    std::vector<double> updateTimes_;
    bool profileCheckpointStarted_ = false;
    bool profileCommitted_ = false;
    double profileStall_ = 0;
    double lastSnapshot_ = 0;
    double lastPersist_ = 0;

    std::uint64_t iterations_ = 0;
    std::uint64_t sinceStart_ = 0; // iterations since the last checkpoint started
    bool inFlight_ = false; // a checkpoint is in flight now
    bool touched_ = false; // a checkpoint was in flight during the running iteration
    bool currentFinal_ = false;
    CheckpointReason current_ = CheckpointReason::None;
    bool signalPending_ = false;
    bool terminatePending_ = false;
    bool requested_ = false;
    bool requestedExit_ = false;
    bool exit_ = false;
};

} // namespace baton::ckpt
