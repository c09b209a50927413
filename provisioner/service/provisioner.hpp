// The provisioner's engine: on every tick (leader only) one squeue snapshot, the events received since
// the last tick, and one step of each live chain's state machine. A tick is set-based: the live chains
// are read in one statement, a job row is written only when slurmctld's facts about it changed, and the
// policy decides for every waiting chain at once (one pass of queue features, one batch of predictions,
// one statement for the decisions), so its cost grows with the changes, not with the chains. Each step writes
// its compare-and-set before it acts (sbatch, scancel), and every action carries an idempotency key that the
// next tick reconciles against squeue, so a batond killed at any instant neither loses a chain nor submits a
// successor twice.
#pragma once

#include "owner_actions.hpp"

#include "cluster.hpp"
#include "config.hpp"
#include "decision_points.hpp"
#include "live_chains.hpp"
#include "metrics.hpp"
#include "plugin_event.hpp"
#include "submitter.hpp"
#include "tables.hpp"

#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>

namespace baton::service {

// How the successors of a chain begun with plain `sbatch --baton` are submitted: job's batch script and
// what slurmctld reports of its request, as a chain spec (script, sbatch_args, workdir, source, note).
nlohmann::json specFromJob(const ClusterJob& job, const std::string& script);

// A chain about to submit its next job, and why (its compare-and-set expects the state it was read in).
struct SubmissionStart {
    const ChainRow* chain = nullptr;
    std::string reason;
    nlohmann::json inputs; // what the decision saw
    int ahead = 1; // the job's seq less the current one's: 2 for a second successor
};

// A chain whose policy decides this tick whether to submit its successor, or (ahead = 2) while that
// successor waits, the job after it: then `current` stands for the successor as it would run, started
// as the current job reaches its limit.
struct AwaitingDecision {
    ChainRow chain;
    ClusterJob current;
    int ahead = 1;
};

class Provisioner {
public:
    Provisioner(const ServiceConfig& config, Tables& tables, Cluster& cluster, Metrics& metrics,
        ChainPolicies policies, DecisionPointBuilder decisionPoint);

    // One tick; throws db::DbError or SlurmError when the database or Slurm cannot be reached.
    void tick();

    // Asked right before each sbatch (the one action that is not idempotent): an instance that lost
    // the leadership during its tick submits nothing more. Default: always leading.
    void setLeadershipCheck(std::function<bool()> stillLeading)
    {
        submitter_.setLeadershipCheck(std::move(stillLeading));
    }

    // A chain whose steps fail this many ticks in a row (for reasons other than refused data, which
    // quarantine at once) is quarantined.
    static constexpr int quarantineAfterFailures = 3;
    // What one chain's spool may cost a tick: bytes read, lines parsed (the newest kept).
    static constexpr std::size_t maxSpoolBytes = 256 << 10;
    static constexpr std::size_t maxSpoolLines = 1000;
    // Owners whose Slurm calls a tick runs at once (owner_actions.hpp).
    static constexpr std::size_t slurmActionThreads = 16;

    // A waiting chain's "wait" decision is written when it is first seen waiting and then once in each
    // interval of waitRecordSeconds, starting at its own phase so that many chains spread their rows.
    static constexpr std::int64_t waitRecordSeconds = 300;
    static constexpr std::int64_t waitRecordPhase(std::int64_t chainId)
    {
        return chainId * 7919 % waitRecordSeconds;
    }
    // Retention deletes at most pruneBatch rows of each table a tick. Nothing is past the period most of
    // the time: a prune that found less than a batch is repeated only pruneEveryTicks later (5 min at
    // the default 30 s); one that filled its batch, the next tick.
    static constexpr int pruneBatch = 5000;
    static constexpr int pruneEveryTicks = 10;

private:
    static constexpr int maxEventsPerTick = 1000; // a backlog is worked off over several ticks
    void processEvents(const std::vector<EventRow>& events, const ClusterQueue& queue);
    void processEvent(const EventRow& row, const ClusterQueue& queue);
    // Whether `uid` may own a chain: not root, nor one of slurm_users (batond would act with their rights).
    bool mayOwnChains(std::int64_t uid) const;
    // nullopt when its owner may own no chain or already has max_live_chains_per_user live chains (the job
    // runs on, alone).
    std::optional<ChainRow> registerChain(const PluginEvent& event, const ClusterJob& job);
    void adoptJob(const ChainRow& chain, const ClusterJob& job);
    // Writes job rows; a row the database refuses is counted against its chain, never the batch.
    void writeJobs(std::span<const JobStore::Write> writes);
    void chainFailed(const ChainRow& chain, std::string_view reason, const std::string& what, bool now);
    void withdrawCancelledChains(const ClusterQueue& queue);

    // The tick's step of one chain (chain_step.cpp): from the tick's read of it (`live`, which the step
    // keeps up to date with what it writes itself) and the queue, the chain's next move through the tables.
    // A running chain with nothing else to do joins `awaiting`.
    void step(LiveChain live, const ClusterQueue& queue, std::vector<AwaitingDecision>& awaiting);
    void stepRunning(LiveChain& live, const std::optional<ClusterJob>& current,
        const std::optional<ClusterJob>& successor, const ClusterQueue& queue,
        std::vector<AwaitingDecision>& awaiting);
    void stepSuccessorPending(LiveChain& live, const std::optional<ClusterJob>& current,
        const std::optional<ClusterJob>& successor, const std::optional<ClusterJob>& second,
        const ClusterQueue& queue, std::vector<AwaitingDecision>& awaiting);
    void queueSecondSuccessor(const LiveChain& live, const std::optional<ClusterJob>& current,
        const std::optional<ClusterJob>& second, const ClusterQueue& queue, std::vector<AwaitingDecision>& awaiting);
    void stepHandover(
        const LiveChain& live, const std::optional<ClusterJob>& current, const std::optional<ClusterJob>& successor);
    // The job of `seq`, refreshed from the queue, with a pending intent reconciled or retried.
    std::optional<ClusterJob> refreshJob(const ChainRow& chain, int seq, const ClusterQueue& queue,
        const std::vector<JobRow>& jobs, const std::optional<SubmissionRow>& submission);
    void recordJob(const ChainRow& chain, int seq, const ClusterJob& job, const std::vector<JobRow>& jobs);
    // Checkpoint hints the plugin spooled while batond was unreachable (read as the chain's owner).
    void collectSpoolHints(LiveChain& live);
    void onCurrentEnded(LiveChain& live, const ClusterJob& current, const ClusterQueue& queue);
    // The current job ended while its successor is queued or waits for its handover checkpoint: the
    // chain's end marker tells the successor that no final checkpoint will come (written as the owner).
    void markPredecessorEnded(const ChainRow& chain, const ClusterJob& predecessor);
    // Cancels a submitted successor (`next`, or a second one) that is not to run.
    bool withdrawSuccessor(const ChainRow& chain, const std::optional<SubmissionRow>& next,
        const ClusterQueue& queue, const std::string& why, bool evenIfStarted);
    bool withdrawSuccessors(const LiveChain& live, const ClusterQueue& queue, const std::string& why, bool evenIfStarted);
    void startHandover(const ChainRow& chain, const ClusterJob& current, const ClusterJob& successor);
    // Queues the handover's TERM for sendHandoverSignals, which sends the tick's signals of every owner
    // at once after the steps (owner_actions.hpp) and records those scancel delivered.
    void signalHandover(const ChainRow& chain, const ClusterJob& current, SignalScope scope);
    bool askBeforeSignal(const ChainRow& chain, const ClusterJob& job, std::optional<std::int64_t> askedAt);
    void sendHandoverSignals();
    // The tick's Slurm actions of many owners, each owner's in order, different owners' at once; none
    // started later than one Slurm call's timeout into the batch.
    void runSlurmActions(std::vector<OwnerAction>& actions);
    // How a Slurm action the runner ran for `chain` ended: Done (its timeouts in a row forgotten),
    // SlurmFailed (`failure` holds slurmctld's or the command's error; the caller reports it and calls
    // slurmCallFailed), or Settled (anything else, recorded here as the chain's internal failure).
    enum class ActionOutcome { Done, SlurmFailed, Settled };
    ActionOutcome outcomeOf(const OwnerAction& action, const ChainRow& chain, std::optional<SlurmError>& failure);
    // A chain's sbatch or scancel failed; one whose calls time out quarantineAfterFailures times in a row
    // is quarantined (its owner's working directory or processes hang every call).
    void slurmCallFailed(const ChainRow& chain, const SlurmError& error);
    // A job of a seq the chain has moved past, requeued after it ended, is cancelled (one training per chain).
    void withdrawEarlierJobsRunningAgain(const std::vector<LiveChain>& chains, const ClusterQueue& queue);
    // A predecessor that Slurm requeued while its successor runs is cancelled: one training per chain.
    void withdrawRequeued(const ChainRow& chain, const ClusterJob& job, const std::string& why);

    // The policy's decisions for every awaiting chain together, and the submissions (tick_decisions.cpp).
    void decide(std::vector<AwaitingDecision>& awaiting, const ClusterQueue& queue);
    bool startSubmission(const ChainRow& chain, const std::string& reason, const nlohmann::json& inputs,
        const ClusterQueue& queue);
    // Records the intents and, in the same transaction, `decisions` (the tick's other rows) with a
    // "submit" row for each intent; returns how many intents were recorded (and then handed to sbatch,
    // unless the queue already holds the job of that key).
    std::size_t startSubmissions(std::span<const SubmissionStart> starts, const ClusterQueue& queue,
        std::vector<DecisionInput> decisions = {});
    void updateGauges(std::int64_t now);
    // Deletes the processed events and decisions past the retention period, at most pruneBatch rows of
    // each a tick: a service that has run for months catches up over a few ticks without a long one.
    void pruneHistory();

    const ServiceConfig& config_;
    Tables& tables_;
    Cluster& cluster_;
    Metrics& metrics_;
    // The name of the policy that decides for `chain` (its own, or the service's), as decisions record it.
    const std::string& policyName(const ChainRow& chain) const { return chain.policy ? *chain.policy : config_.policy; }

    ChainPolicies policies_;
    DecisionPointBuilder decisionPoint_;
    Submitter submitter_;
    std::int64_t now_ = 0;
    // The interval in which each waiting chain's last "wait" decision was written: one per
    // waitRecordSeconds shows what the policy saw, where one per tick would add a row per chain per tick.
    std::unordered_map<std::int64_t, std::int64_t> waitSlot_;
    LiveChainCache liveChainCache_; // the live chains' rows as the last tick read them
    // Job rows the steps found changed, written together after them: bookkeeping that the next tick
    // rebuilds from the queue if batond stops first, and that no step reads back.
    std::vector<JobStore::Write> jobWrites_;
    // The live chains at the last count, in id order, and the highest chain id then (see updateGauges).
    std::vector<std::int64_t> liveIds_;
    std::optional<std::int64_t> countedMaxId_;
    // The session in which the tick's bookkeeping was set to commit without waiting for the disk.
    std::uint64_t bookkeepingSession_ = 0;
    // Failed steps in a row, of the chains whose last step failed (see quarantineAfterFailures).
    std::unordered_map<std::int64_t, int> chainFailures_;
    // The seq whose end marker each chain's directory holds, as written by this batond (a restarted one
    // writes it once more: the same text).
    std::unordered_map<std::int64_t, std::int64_t> endMarked_;
    // The handover request each chain's directory holds, as written by this batond (askBeforeSignal): for
    // which job, when, and whether it was written. A restarted batond writes it once more.
    struct HandoverRequest {
        std::int64_t jobId = 0;
        std::int64_t at = 0;
        bool written = false;
    };
    std::unordered_map<std::int64_t, HandoverRequest> handoverRequests_;
    // The seq after whose end each chain's spool was read (see collectSpoolHints).
    std::unordered_map<std::int64_t, std::int64_t> spoolRead_;
    // The jobs this tick submitted, which its queue (read before) does not hold (withdrawCancelledChains).
    std::unordered_set<std::int64_t> submittedThisTick_;
    // Slurm calls of a chain that timed out in a row (see slurmCallFailed).
    std::unordered_map<std::int64_t, int> slurmTimeouts_;
    // The TERMs the tick's steps asked for, sent after them (see signalHandover): a handover's, or the one
    // `batonctl preempt` asked for.
    struct HandoverSignal {
        enum class Why { Handover, Preempt };
        ChainRow chain;
        std::int64_t jobId = 0;
        SignalScope scope = SignalScope::Full;
        Why why = Why::Handover;
    };
    std::vector<HandoverSignal> handoverSignals_;
    // Ticks since the last prune (see pruneEveryTicks); the first tick prunes.
    int ticksSincePrune_ = pruneEveryTicks;
};

} // namespace baton::service
