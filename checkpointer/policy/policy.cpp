#include "baton/ckpt/policy.hpp"

#include "common/baton_contract.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace baton::ckpt {

namespace {

double median(std::vector<double> values)
{
    if (values.empty())
        return 0;
    const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), mid, values.end());
    return *mid;
}

std::string format(const char* pattern, auto... values)
{
    char text[512];
    std::snprintf(text, sizeof text, pattern, values...);
    return text;
}

double parsePercent(const char* name, const char* value)
{
    const std::string_view text(value);
    double percent = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), percent);
    if (ec != std::errc {} || end != text.data() + text.size() || !contract::overheadInRange(percent))
        throw std::invalid_argument(std::string(name) + ": '" + std::string(text)
            + "' is not a percentage greater than 0 and less than 100");
    return percent;
}

} // namespace

PolicyOptions applyEnvironment(PolicyOptions options, const EnvironmentLookup& lookup)
{
    const auto get
        = [&](const char* name) -> const char* { return lookup ? lookup(name) : std::getenv(name); };
    if (const char* overhead = get("BATON_OVERHEAD"); overhead != nullptr && *overhead != '\0')
        options.targetPercent = parsePercent("BATON_OVERHEAD", overhead);
    if (auto deadline = parseDeadline("BATON_DEADLINE", get("BATON_DEADLINE")))
        options.deadline = deadline;
    if (auto margin = parseMargin("BATON_DEADLINE_MARGIN", get("BATON_DEADLINE_MARGIN")))
        options.deadlineMargin = *margin;
    return options;
}

const char* toString(CheckpointReason reason)
{
    switch (reason) {
    case CheckpointReason::None:
        return "none";
    case CheckpointReason::Profile:
        return "profile";
    case CheckpointReason::Interval:
        return "interval";
    case CheckpointReason::Signal:
        return "signal";
    case CheckpointReason::Terminate:
        return "terminate";
    case CheckpointReason::Deadline:
        return "deadline";
    case CheckpointReason::Requested:
        return "requested";
    case CheckpointReason::Finish:
        return "finish";
    }
    return "unknown";
}

Policy::Policy(PolicyOptions options, Clock clock)
    : options_(std::move(options))
    , clock_(std::move(clock))
    , lastTick_(clock_())
    , planner_(clock_)
{
    if (!contract::overheadInRange(options_.targetPercent))
        throw std::invalid_argument("overhead target must be a percentage greater than 0 and less than 100");
    options_.profileIterations = std::max(1u, options_.profileIterations);
    planner_.setDeadline(options_.deadline);
    planner_.setMargin(options_.deadlineMargin);
    planner_.setSafetyFactor(options_.safetyFactor);
    planner_.setSlack(options_.deadlineSlack);
}

Policy::~Policy() = default;

void Policy::setDeviceMemory(std::uint64_t peakBytes, std::uint64_t totalBytes)
{
    profile_.devicePeakBytes = peakBytes;
    profile_.deviceTotalBytes = totalBytes;
}

SnapshotTarget Policy::snapshotTarget() const
{
    return chooseSnapshotTarget(profile_, options_.deviceSafetyFraction);
}

void Policy::enableSignals(bool usr1, bool term)
{
    signals_.reset();
    signals_ = std::make_unique<SignalHandlers>(usr1, term);
}

void Policy::disableSignals()
{
    signals_.reset();
}

std::uint64_t Policy::interval() const
{
    return adaptive_ ? adaptive_->interval() : 0;
}

std::vector<IntervalChange> Policy::changes() const
{
    return adaptive_ ? adaptive_->changes() : std::vector<IntervalChange> {};
}

void Policy::log(const std::string& message) const
{
    if (log_)
        log_(message);
}

Decision Policy::tick()
{
    const double now = clock_();
    const double seconds = now - lastTick_;
    lastTick_ = now;
    return onIteration(seconds);
}

Decision Policy::onIteration(double iterationSeconds, double updateSeconds)
{
    ++iterations_;
    ++sinceStart_;
    const bool touched = touched_;
    touched_ = inFlight_;
    planner_.observeIteration(iterationSeconds);
    if (signals_) {
        const SignalRequests requests = signals_->take();
        if (requests.checkpoint && !signalPending_)
            log(requests.terminate ? "SIGTERM: checkpoint at this boundary, then exit"
                                   : "SIGUSR1: checkpoint now");
        signalPending_ = signalPending_ || requests.checkpoint;
        terminatePending_ = terminatePending_ || requests.terminate;
    }
    if (exit_)
        return {};

    if (adaptive_) {
        adaptive_->recordIteration(iterationSeconds, touched);
    } else if (!profileCheckpointStarted_) {
        if (!touched) {
            cleanTimes_.push_back(iterationSeconds);
            if (updateSeconds >= 0)
                updateTimes_.push_back(updateSeconds);
        }
    } else if (touched) {
        profileStall_ += std::max(0.0, iterationSeconds - profile_.iterationSeconds);
    }
    if (!adaptive_ && profileCommitted_)
        finishProfile();

    if (inFlight_) {
        if (adaptive_ && sinceStart_ >= adaptive_->interval())
            adaptive_->checkpointDeferred();
        return {};
    }
    if (terminatePending_)
        return start(CheckpointReason::Terminate, true);
    // A checkpoint started now would still be in flight when the final one is due: make this one the
    // final checkpoint if it was asked for, and skip it if it was only the interval's turn.
    const bool finalNear = planner_.finalCheckpointDue(true);
    if (planner_.finalCheckpointDue(false) || (finalNear && (signalPending_ || requested_)))
        return start(CheckpointReason::Deadline, true);
    if (signalPending_)
        return start(CheckpointReason::Signal, false);
    if (requested_)
        return start(CheckpointReason::Requested, requestedExit_);
    if (finalNear)
        return {};

    if (!adaptive_) {
        if (profileCheckpointStarted_ || cleanTimes_.size() < options_.profileIterations)
            return {};
        profile_.iterationSeconds = median(cleanTimes_);
        profile_.updateSeconds = median(updateTimes_);
        if (options_.previous && !needsReprofile(*options_.previous, profile_.iterationSeconds)) {
            const TuningState& previous = *options_.previous;
            profile_.stallSeconds = previous.stallSeconds;
            profile_.persistSeconds = previous.persistSeconds;
            profile_.hostSnapshotSeconds = profile_.gpuSnapshotSeconds = previous.snapshotSeconds;
            log(format("iteration time %.4f s within %.0f%% of the previous job's %.4f s: keeping k = %llu",
                profile_.iterationSeconds, reprofileTolerance * 100, previous.iterationSeconds,
                static_cast<unsigned long long>(previous.interval)));
            startAdaptive(previous.interval, previous.minimumInterval);
            sinceStart_ = 0;
            return {};
        }
        if (options_.previous)
            log(format("iteration time %.4f s differs from the previous job's %.4f s by more than %.0f%%: "
                       "profiling again",
                profile_.iterationSeconds, options_.previous->iterationSeconds, reprofileTolerance * 100));
        return start(CheckpointReason::Profile, false);
    }
    if (sinceStart_ >= adaptive_->interval())
        return start(CheckpointReason::Interval, false);
    return {};
}

Decision Policy::start(CheckpointReason reason, bool final)
{
    if (adaptive_)
        adaptive_->checkpointStarted(reason == CheckpointReason::Interval);
    inFlight_ = true;
    touched_ = true;
    sinceStart_ = 0;
    current_ = reason;
    currentFinal_ = final;
    if (reason == CheckpointReason::Profile)
        profileCheckpointStarted_ = true;
    if (reason == CheckpointReason::Deadline)
        planner_.finalCheckpointStarted();
    if (final || reason == CheckpointReason::Signal || reason == CheckpointReason::Requested) {
        signalPending_ = false;
        requested_ = false;
    }
    if (reason == CheckpointReason::Deadline)
        log(format("final checkpoint now: %.1f s left to commit it (expected %.2f s)",
            planner_.secondsToCommitBy(), planner_.checkpointSeconds()));
    return { true, final, reason };
}

void Policy::checkpointCommitted(const CheckpointTimings& timings)
{
    if (!inFlight_)
        return;
    inFlight_ = false;
    lastSnapshot_ = timings.snapshotSeconds;
    lastPersist_ = timings.persistSeconds;
    planner_.observeCheckpoint(timings.snapshotSeconds, timings.persistSeconds + timings.drainSeconds);
    if (adaptive_)
        adaptive_->checkpointCommitted(timings.snapshotSeconds + timings.persistSeconds);
    if (current_ == CheckpointReason::Profile) {
        profileCommitted_ = true;
        if (snapshotTarget() == SnapshotTarget::Device)
            profile_.gpuSnapshotSeconds = timings.snapshotSeconds;
        else
            profile_.hostSnapshotSeconds = timings.snapshotSeconds;
        profile_.persistSeconds = timings.persistSeconds;
        if (timings.bytes > 0)
            profile_.checkpointBytes = timings.bytes;
    }
    if (currentFinal_) {
        exit_ = true;
        if (current_ == CheckpointReason::Deadline)
            planner_.finalCheckpointCommitted();
        log(format("final checkpoint (%s) committed: the job should exit", toString(current_)));
    }
}

void Policy::checkpointFailed(const std::string& why)
{
    if (!inFlight_)
        return;
    inFlight_ = false;
    log(format("%s checkpoint failed: %s", toString(current_), why.c_str()));
    switch (current_) {
    case CheckpointReason::Profile:
        // Time a fresh set of iterations before trying again, rather than failing at every boundary.
        profileCheckpointStarted_ = false;
        profileStall_ = 0;
        cleanTimes_.clear();
        updateTimes_.clear();
        break;
    case CheckpointReason::Deadline:
        planner_.finalCheckpointFailed();
        break;
    case CheckpointReason::Terminate:
        terminatePending_ = true;
        break;
    case CheckpointReason::Signal:
        signalPending_ = true;
        break;
    case CheckpointReason::Requested:
        requested_ = true;
        break;
    default:
        break;
    }
}

void Policy::finishProfile()
{
    profile_.stallSeconds = profileStall_;
    const IntervalChoice choice
        = chooseInterval(profile_, options_.targetPercent, options_.deviceSafetyFraction);
    log(format(
        "profiled: Ti %.4f s, Tw %.4f s, snapshot %.4f s (%s), persist %.4f s, stall %.4f s -> k = %llu "
        "(%s), expected overhead %.2f%%",
        profile_.iterationSeconds, profile_.updateSeconds, snapshotSeconds(profile_, choice.target),
        toString(choice.target), profile_.persistSeconds, choice.stallSeconds,
        static_cast<unsigned long long>(choice.interval), choice.reason.c_str(), choice.overheadPercent));
    startAdaptive(choice.interval, choice.interval);
}

void Policy::startAdaptive(std::uint64_t interval, std::uint64_t minimum)
{
    AdaptiveOptions adaptive = options_.adaptive;
    adaptive.targetPercent = options_.targetPercent;
    adaptive_ = std::make_unique<AdaptiveInterval>(minimum, profile_.iterationSeconds, adaptive, interval);
    adaptive_->onChange([this](const IntervalChange& change) {
        log(format("interval %llu -> %llu after %llu checkpoints: %s",
            static_cast<unsigned long long>(change.from), static_cast<unsigned long long>(change.to),
            static_cast<unsigned long long>(change.cycle), change.reason.c_str()));
    });
}

TuningState Policy::tuning() const
{
    TuningState state;
    state.interval = std::max<std::uint64_t>(1, interval());
    state.minimumInterval = adaptive_ ? adaptive_->minimum() : 1;
    state.iterationSeconds = adaptive_ ? adaptive_->cleanIterationSeconds() : profile_.iterationSeconds;
    state.updateSeconds = profile_.updateSeconds;
    const SnapshotTarget target = snapshotTarget();
    state.snapshotSeconds = lastSnapshot_ > 0 ? lastSnapshot_ : snapshotSeconds(profile_, target);
    state.persistSeconds = lastPersist_ > 0 ? lastPersist_ : profile_.persistSeconds;
    state.stallSeconds = std::max(0.0, profile_.stallSeconds);
    state.overheadPercent = measuredOverheadPercent();
    state.targetPercent = options_.targetPercent;
    state.snapshotTarget = toString(target);
    return state;
}

} // namespace baton::ckpt
