// The per-iteration driver that joins the checkpointer and its policy: it profiles the first
// iterations with the checkpointer's measured timings, checkpoints every k iterations, adapts k, plans
// the final checkpoint before the deadline, reacts to SIGUSR1/SIGTERM, and writes the sampler and
// tuning state into every manifest. A training loop:
//
//     Session session(SessionOptions::fromEnvironment());
//     session.checkpointer().registerRegion("weights", weights, bytes);
//     session.attachSampler(&sampler);
//     auto restored = session.restore();
//     for (uint64_t it = restored.restored ? restored.iteration + 1 : 0; !session.shouldExit(); ++it) {
//         forwardBackward(sampler);
//         session.beforeUpdate();
//         optimizerStep();
//         session.step(it); // may start a checkpoint of iteration `it`
//         if (it + 1 == totalIterations) { session.markTrainingDone(); break; }
//     }
//     session.finish(); // after markTrainingDone(): a final checkpoint with training_done
#pragma once

#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/policy.hpp"
#include "baton/ckpt/sampler.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace baton::ckpt {

struct SessionOptions {
    Options checkpointer;
    PolicyOptions policy;
    bool handleSignals = false; // opt-in SIGUSR1/SIGTERM handlers (signals.hpp)
    // Checkpoint every `fixedInterval` iterations instead of asking the policy (0: the policy decides).
    std::uint64_t fixedInterval = 0;
    // A checkpoint due while the previous one is still in flight waits for it instead of being dropped
    // (several ranks must all take the same checkpoints).
    bool waitForInFlight = false;

    // BATON_CHAIN_DIR, BATON_KEEP, BATON_JOB_ID, BATON_CHAIN_SEQ, BATON_HANDOVER_WAIT
    // (Options::fromEnvironment; the handover wait is checkpointer.handoverWaitSeconds), BATON_OVERHEAD,
    // BATON_DEADLINE and BATON_DEADLINE_MARGIN. Throws ConfigError naming the variable.
    static SessionOptions fromEnvironment();
};

// One committed or failed checkpoint, as the session saw it.
struct SessionCheckpoint {
    CheckpointStats stats;
    CheckpointReason reason = CheckpointReason::None;
    bool final = false;
};

class Session {
public:
    explicit Session(SessionOptions options);
    // Drives a checkpointer the caller owns (it must outlive the session); options.checkpointer unused.
    Session(Checkpointer& checkpointer, SessionOptions options);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    Checkpointer& checkpointer() { return *checkpointer_; }
    Policy& policy() { return policy_; }

    // The sampler's state goes into every manifest's `sampler` field and is restored by restore().
    // The sampler must outlive the session (or be detached with nullptr).
    void attachSampler(ResumableSampler* sampler) { sampler_ = sampler; }
    void onCheckpoint(std::function<void(const SessionCheckpoint&)> callback)
    {
        onCheckpoint_ = std::move(callback);
    }
    // Called with the iteration right before each checkpoint starts, to stage what lives outside the
    // registered regions (blobs, manifest fields).
    void beforeCheckpoint(std::function<void(std::uint64_t)> hook) { beforeCheckpoint_ = std::move(hook); }
    // In that hook: whether the checkpoint about to start is a final one (the job exits after it).
    bool startingFinal() const { return startingFinal_; }
    // Turns every step's decision into the one all ranks take (a collective, called at each step() on
    // every rank): one rank's signal or deadline must not leave the others training.
    void agreeDecision(std::function<Decision(const Decision&)> hook) { agreeDecision_ = std::move(hook); }

    // Restores the newest verified checkpoint, the sampler position and the previous job's tuning
    // (the policy then keeps its k unless this job's iteration time differs by more than 20 %). With a
    // handover wait (BATON_HANDOVER_WAIT) in a successor job it first waits for the predecessor's final
    // checkpoint; RestoreResult::handoverWaitSeconds says how long.
    RestoreResult restore();

    // Checkpoint at the next step() (a handover: the successor has started); `exitAfter` makes it the
    // final one.
    void requestCheckpoint(bool exitAfter) { policy_.requestCheckpoint(exitAfter); }

    void beforeUpdate();
    // At the end of iteration `iteration` (weights consistent): times it, asks the policy and starts a
    // checkpoint when it says so. A final checkpoint (deadline, SIGTERM) is waited for, so that
    // shouldExit() is true as soon as it has committed.
    Decision step(std::uint64_t iteration);
    // Same, with the weight update's duration timed by the caller (negative: unknown).
    Decision step(std::uint64_t iteration, double updateSeconds);
    // Reports a checkpoint that step() started and that has ended (with `wait`, once it has) to the
    // policy and the onCheckpoint callback.
    void collect(bool wait);
    // Waits for an in-flight checkpoint and reports it to the policy. After markTrainingDone() it then
    // commits a final checkpoint of the last iteration with `training_done` (even when the newest
    // checkpoint already holds that iteration, so that the flag exists); returns whether that commit
    // (or, without one, the last checkpoint) succeeded. The destructor calls it too, unless a call of
    // the caller's has just failed: by then the regions may be gone.
    bool finish();
    // The application has trained everything: the final checkpoint (the next one step() makes final, or
    // finish()'s) carries `training_done`, which tells the provisioner to end the chain.
    void markTrainingDone(bool done = true) { trainingDone_ = done; }
    bool trainingDone() const { return trainingDone_; }

    // Also true once a final checkpoint that the ranks agreed on has committed.
    bool shouldExit() const { return policy_.shouldExit() || agreedExit_; }
    std::uint64_t interval() const { return policy_.interval(); }
    double measuredOverheadPercent() const { return policy_.measuredOverheadPercent(); }

private:
    using SteadyClock = std::chrono::steady_clock;
    Session(std::unique_ptr<Checkpointer> owned, SessionOptions options);
    Decision decide(std::uint64_t iteration, double iterationSeconds, double updateSeconds);
    Decision start(std::uint64_t iteration, const Decision& decision);
    void publishState();
    void pollHandoverRequest(SteadyClock::time_point now);
    void log(const std::string& message) const;

    std::function<void(std::string_view)> log_;
    std::unique_ptr<Checkpointer> owned_;
    Checkpointer* checkpointer_;
    Policy policy_;
    ResumableSampler* sampler_ = nullptr;
    std::optional<TuningState> previousTuning_;
    std::function<void(const SessionCheckpoint&)> onCheckpoint_;
    std::function<void(std::uint64_t)> beforeCheckpoint_;
    bool startingFinal_ = false;
    std::function<Decision(const Decision&)> agreeDecision_;
    std::uint64_t fixedInterval_ = 0;
    bool waitForInFlight_ = false;
    bool agreedExit_ = false;
    std::optional<SteadyClock::time_point> lastBoundary_;
    std::optional<SteadyClock::time_point> updateStart_;
    std::optional<SteadyClock::time_point> lastRequestPoll_; // batond's handover request, looked for
    bool handoverRequested_ = false;
    bool started_ = false; // a checkpoint the policy knows of is in flight
    CheckpointReason reason_ = CheckpointReason::None;
    bool final_ = false;
    bool trainingDone_ = false;
    // finish()'s last training_done checkpoint did not commit: the destructor does not try it again.
    bool finishFailed_ = false;
    std::optional<std::uint64_t> lastIteration_; // the newest consistent iteration (restored or stepped)
};

} // namespace baton::ckpt
