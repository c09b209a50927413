#include "baton/ckpt/session.hpp"

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/error.hpp"
#include "common/baton_contract.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace baton::ckpt {

namespace {

double seconds(std::chrono::steady_clock::duration duration)
{
    return std::chrono::duration<double>(duration).count();
}

// Bad policy settings are configuration errors, like the checkpointer's own.
PolicyOptions checked(PolicyOptions options)
{
    if (!contract::overheadInRange(options.targetPercent))
        throw ConfigError("overhead target must be a percentage greater than 0 and less than 100, got "
            + std::to_string(options.targetPercent));
    if (!(options.deadlineMargin >= 0) || !std::isfinite(options.deadlineMargin))
        throw ConfigError("deadline margin must be zero or a positive number of seconds");
    if (!(options.safetyFactor >= 1) || !std::isfinite(options.safetyFactor))
        throw ConfigError("checkpoint safety factor must be at least 1");
    return options;
}

} // namespace

SessionOptions SessionOptions::fromEnvironment()
{
    SessionOptions options;
    options.checkpointer = Options::fromEnvironment();
    try {
        options.policy = applyEnvironment(options.policy);
    } catch (const std::invalid_argument& error) {
        throw ConfigError(error.what());
    }
    return options;
}

Session::Session(SessionOptions options)
    : Session(std::make_unique<Checkpointer>(options.checkpointer), options)
{ }

// The session is built around the checkpointer as around a borrowed one, then owns it (should that
// throw, `owned` is destroyed with the call).
Session::Session(std::unique_ptr<Checkpointer> owned, SessionOptions options)
    : Session(*owned, std::move(options))
{
    owned_ = std::move(owned);
}

Session::Session(Checkpointer& checkpointer, SessionOptions options)
    : log_(checkpointer.options().log)
    , checkpointer_(&checkpointer)
    , policy_(checked(options.policy))
    , fixedInterval_(options.fixedInterval)
    , waitForInFlight_(options.waitForInFlight)
{
    policy_.onLog([this](const std::string& message) { log(message); });
    lastBoundary_ = SteadyClock::now();
    if (options.handleSignals)
        policy_.enableSignals();
}

Session::~Session()
{
    try {
        // After a failed finish() no second snapshot: by now the caller's regions declared after the
        // session are freed.
        if (finishFailed_)
            collect(true);
        else
            finish();
    } catch (const std::exception& error) {
        log(std::string("while finishing: ") + error.what());
    }
}

void Session::log(const std::string& message) const
{
    if (log_)
        log_(message);
    else
        std::fprintf(stderr, "baton: %s\n", message.c_str());
}

RestoreResult Session::restore()
{
    RestoreResult result = checkpointer_->restore();
    if (result.restored) {
        const nlohmann::json& manifest = result.manifest;
        if (const auto tuning = manifest.find("tuning"); tuning != manifest.end() && !tuning->empty()) {
            try {
                previousTuning_ = tuning->get<TuningState>();
                policy_.setPrevious(*previousTuning_);
            } catch (const std::invalid_argument& error) {
                log(std::string("ignoring the checkpoint's tuning state, profiling again: ") + error.what());
            }
        }
        const auto sampler = manifest.find("sampler");
        if (sampler_ != nullptr && sampler != manifest.end() && !sampler->is_null()) {
            SamplerState saved;
            try {
                saved = sampler->get<SamplerState>();
            } catch (const std::invalid_argument& error) {
                throw Error(std::string("the checkpoint's sampler state is unusable: ") + error.what());
            }
            const std::uint64_t savedRanks = saved.ranks;
            try {
                // On another world size the saved ranks' consumed part of the epoch stays done and this
                // world shares the rest (reshardedState in sampler.hpp).
                sampler_->resume(saved);
            } catch (const std::invalid_argument& error) {
                throw Error(std::string("the checkpoint's sampler state does not fit: ") + error.what());
            }
            if (savedRanks != sampler_->state().ranks)
                log("sampler: " + std::to_string(savedRanks) + " ranks before, "
                    + std::to_string(sampler_->state().ranks) + " now: epoch "
                    + std::to_string(sampler_->epoch()) + " continues after its first "
                    + std::to_string(sampler_->offset()) + " positions");
        }
        lastIteration_ = result.iteration;
    }
    lastBoundary_ = SteadyClock::now();
    return result;
}

void Session::beforeUpdate()
{
    checkpointer_->beforeUpdate();
    updateStart_ = SteadyClock::now();
}

void Session::publishState()
{
    if (sampler_ != nullptr) {
        checkpointer_->setManifestField("sampler", nlohmann::json(sampler_->state()));
        checkpointer_->setEpoch(sampler_->epoch());
    }
    if (fixedInterval_ > 0)
        return; // no policy, no tuning
    // Before this job has its own k, carry the previous job's tuning on rather than a placeholder.
    if (!policy_.profiling())
        checkpointer_->setManifestField("tuning", nlohmann::json(policy_.tuning()));
    else if (previousTuning_)
        checkpointer_->setManifestField("tuning", nlohmann::json(*previousTuning_));
}

void Session::collect(bool wait)
{
    if (!started_)
        return;
    if (wait)
        checkpointer_->wait();
    else if (checkpointer_->inFlight())
        return;
    started_ = false;
    SessionCheckpoint done { checkpointer_->lastCheckpoint(), reason_, final_ };
    if (fixedInterval_ > 0) {
        // The policy does not drive a fixed interval: it hears of no checkpoint.
    } else if (done.stats.committed) {
        policy_.checkpointCommitted({ done.stats.snapshotSeconds, done.stats.persistSeconds, done.stats.bytes,
            checkpointer_->drainStatus().lastDrainSeconds });
    } else {
        policy_.checkpointFailed(done.stats.error.empty() ? checkpointer_->lastError() : done.stats.error);
    }
    if (onCheckpoint_)
        onCheckpoint_(done);
}

Decision Session::step(std::uint64_t iteration)
{
    const double updateSeconds = updateStart_ ? seconds(SteadyClock::now() - *updateStart_) : -1;
    return step(iteration, updateSeconds);
}

Decision Session::step(std::uint64_t iteration, double updateSeconds)
{
    const auto now = SteadyClock::now();
    const double iterationSeconds = lastBoundary_ ? seconds(now - *lastBoundary_) : -1;
    lastBoundary_ = now;
    updateStart_.reset();

    lastIteration_ = iteration;
    checkpointer_->afterUpdate(iteration);
    collect(false);
    pollHandoverRequest(now);
    Decision decision = decide(iteration, iterationSeconds, updateSeconds);
    if (agreeDecision_)
        decision = agreeDecision_(decision);
    if (!decision.checkpoint)
        return decision;
    return start(iteration, decision);
}

// batond asks for a handover's final checkpoint in the chain directory before it signals (see
// contract::kHandoverRequestFile): a launcher that stands between Slurm's signal and this process would
// give it too little time. One small read per second at most, and none once asked or without a seq.
void Session::pollHandoverRequest(SteadyClock::time_point now)
{
    const Options& options = checkpointer_->options();
    if (fixedInterval_ > 0 || handoverRequested_ || !options.chainSeq || options.chainDir.empty())
        return;
    // Ranks that agree on every decision need one reader: rank 0's request becomes everyone's.
    if (agreeDecision_ && options.coordinator && options.coordinator->rank() != 0)
        return;
    constexpr auto kPoll = std::chrono::duration<double>(contract::kHandoverRequestPollSeconds);
    if (lastRequestPoll_ && now - *lastRequestPoll_ < kPoll)
        return;
    lastRequestPoll_ = now;
    if (!handoverRequested(options.chainDir, *options.chainSeq, options.jobId))
        return;
    handoverRequested_ = true;
    log("handover requested by batond (" + std::string(contract::kHandoverRequestFile)
        + "): checkpoint at this boundary, then exit");
    policy_.requestCheckpoint(true);
}

Decision Session::decide(std::uint64_t iteration, double iterationSeconds, double updateSeconds)
{
    if (fixedInterval_ > 0)
        return iteration % fixedInterval_ == 0 ? Decision { true, false, CheckpointReason::Interval }
                                               : Decision {};
    if (iterationSeconds < 0)
        return {};
    return policy_.onIteration(iterationSeconds, updateSeconds);
}

Decision Session::start(std::uint64_t iteration, const Decision& decision)
{
    if (waitForInFlight_ && checkpointer_->inFlight()) {
        collect(true);
        checkpointer_->wait();
    }
    publishState();
    // A checkpoint that will be refused (one is in flight) must not replace the state it is writing.
    startingFinal_ = decision.final;
    if (beforeCheckpoint_ && !checkpointer_->inFlight())
        beforeCheckpoint_(iteration);
    if (fixedInterval_ == 0)
        checkpointer_->setDeviceSnapshot(
            policy_.snapshotTarget() == SnapshotTarget::Device && checkpointer_->deviceAvailable());
    if (!checkpointer_->requestCheckpoint(iteration, { decision.final, decision.final && trainingDone_ })) {
        if (fixedInterval_ == 0)
            policy_.checkpointFailed(checkpointer_->lastError().empty() ? "a checkpoint is already in flight"
                                                                        : checkpointer_->lastError());
        return {};
    }
    started_ = true;
    reason_ = decision.reason;
    final_ = decision.final;
    if (decision.final) {
        collect(true);
        // Every rank exits after a final checkpoint they agreed on, also one its own policy did not ask for.
        agreedExit_ = agreedExit_ || checkpointer_->lastCheckpoint().committed;
    }
    return decision;
}

bool Session::finish()
{
    collect(true);
    if (!trainingDone_)
        return checkpointer_->lastCheckpoint().committed || checkpointer_->counters().requested == 0;
    const std::uint64_t iteration = lastIteration_.value_or(0);
    const CheckpointStats last = checkpointer_->lastCheckpoint();
    if (last.committed && last.iteration == iteration && last.final && last.trainingDone)
        return true; // finish() called again, or step()'s final checkpoint already carried the flag
    publishState();
    startingFinal_ = true;
    if (beforeCheckpoint_)
        beforeCheckpoint_(iteration);
    if (!checkpointer_->requestCheckpoint(iteration, { true, true })) {
        log("the final checkpoint of finished training could not start: " + checkpointer_->lastError());
        finishFailed_ = true;
        return false;
    }
    started_ = true;
    reason_ = CheckpointReason::Finish;
    final_ = true;
    collect(true);
    const CheckpointStats written = checkpointer_->lastCheckpoint();
    finishFailed_ = !written.committed;
    if (!written.committed)
        log("the final checkpoint of finished training failed: " + written.error);
    return written.committed;
}

} // namespace baton::ckpt
