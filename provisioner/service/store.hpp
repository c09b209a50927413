// batond's view of the database: chains with their state machine, submissions with idempotency keys,
// jobs as slurmctld reported them, events, checkpoints (hints), decisions and handovers. Every state
// change is a compare-and-set (`UPDATE ... WHERE state = ANY(allowed)`), so two instances or a
// restarted one can never both act on a stale view.
#pragma once

#include "chain_state.hpp"
#include "cluster.hpp"

#include <connection.hpp>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace baton::service {

struct ChainRow {
    std::int64_t id = 0;
    std::int64_t ownerUid = 0;
    std::string ownerName;
    std::string name;
    ChainState state = ChainState::Running;
    int seq = 0; // the current job's sequence number (restart count)
    int generation = -1; // predecessor seq of the last handover
    int retries = 0;
    std::optional<std::string> reason;
    nlohmann::json spec; // how to submit the next job: script, sbatch_args, workdir
    std::optional<std::string> chainDir;
    bool resubmitRequested = false;
    std::int64_t updatedAt = 0;
    std::string token; // in the keys of its submissions: unguessable by other users

    nlohmann::json toJson() const;
};

struct JobRow {
    int seq = 0;
    std::int64_t slurmJobId = 0;
    std::string state;
    std::optional<std::int64_t> submitTime, startTime, endTime, timeLimitSeconds;
    std::optional<int> exitCode;
    bool withdrawn = false; // ended without running: it gave its seq back
};

struct SubmissionRow {
    int seq = 0;
    std::string key;
    std::string reason;
    std::string state; // intent, submitted, failed, cancelled
    std::optional<std::int64_t> slurmJobId;
    std::int64_t createdAt = 0;
    std::string error; // why sbatch failed, for a failed one
};

struct EventRow {
    std::int64_t id = 0;
    std::string kind;
    std::optional<std::string> chainName;
    std::optional<std::int64_t> slurmJobId;
    nlohmann::json payload;
};

// What one tick knows of a live chain: the chain (its spec left out: Store::spec reads it when a job is
// submitted), the job rows and submissions of its current and next job, and whether a checkpoint said
// the training is done.
struct LiveChain {
    ChainRow chain;
    std::vector<JobRow> jobs; // of seq and seq + 1
    std::optional<SubmissionRow> current, next; // the submissions of seq and seq + 1
    bool trainingDone = false;
    std::optional<double> newestCheckpointAt; // when its newest checkpoint was written (epoch seconds)
};

// What the tick read of each live chain beyond its own row, and the chain's revision and seq then (the
// schema counts a chain's revision up with every change to its jobs, submissions and checkpoints): the
// next read takes these rows from here while both stay, and reads only the changed chains' again.
struct LiveChainCache {
    struct Entry {
        std::int64_t revision = 0;
        int seq = 0; // which job's rows are the current ones
        LiveChain rows; // rows.chain is not used: a chain's own row is read every time
    };
    std::unordered_map<std::int64_t, Entry> chains;
    // The database session they were read in: after a reconnect (perhaps to a promoted standby, whose
    // revisions can repeat with other rows) everything is read again.
    std::uint64_t session = 0;
    std::size_t readAgain = 0; // how many chains the last read took from the database
};

// One decision of a tick, for recordDecisions.
struct DecisionInput {
    std::int64_t chainId = 0;
    std::string action;
    nlohmann::json inputs;
    std::string outcome;
};

// A chain that is to submit job `seq` (its current seq + 1), if it is still in `from`.
struct IntentRequest {
    std::int64_t chainId = 0;
    ChainState from = ChainState::Running;
    int seq = 0;
    std::string key;
    std::string reason;
};

// A job sbatch accepted for an intent, with the wait the policy predicted for it, if any.
struct SubmittedJob {
    std::string key;
    std::int64_t chainId = 0;
    std::int64_t slurmJobId = 0;
    std::optional<double> predictedWaitSeconds;
};

class Store {
public:
    explicit Store(db::Connection& connection)
        : connection_(connection)
    { }

    // Creates the chain unless (owner, name) exists; returns the chain either way.
    ChainRow createChain(std::int64_t ownerUid, const std::string& ownerName, const std::string& name,
        const std::optional<std::string>& chainDir, const nlohmann::json& spec);
    std::optional<ChainRow> chain(std::int64_t id);
    std::optional<ChainRow> chain(std::int64_t ownerUid, const std::string& name);
    // Every chain, or the owner's; optionally only those in `state`; in id order, at most `limit` of them
    // after the id `afterId`.
    std::vector<ChainRow> chains(std::optional<std::int64_t> ownerUid, std::optional<ChainState> state,
        std::int64_t afterId = 0, std::int64_t limit = std::numeric_limits<std::int64_t>::max());
    // Every live chain with what a tick reads of it, from one snapshot of the database, in one statement
    // whatever the number of chains; the rows of a chain whose revision and seq are those in `cache`
    // come from there.
    std::vector<LiveChain> liveChainsForTick(LiveChainCache& cache);
    nlohmann::json spec(std::int64_t chainId);
    // Compare-and-set through the state machine's table: `event` moves the chain from the state it had
    // when `chain` was read, fenced on that state and seq; false (and nothing written) when the table
    // does not allow the event there or the chain changed since.
    bool transition(const ChainRow& chain, ChainEvent event,
        const std::optional<std::string>& reason = std::nullopt);
    // The successor became the current job (PredecessorEnded, or a job its owner submitted by hand),
    // fenced like transition().
    bool advance(const ChainRow& chain, ChainEvent event);
    // An ended or quarantined chain runs again (event Resubmit): it continues after the highest seq its
    // jobs and submissions ever used, with a fresh retry budget and, if given, a new spec. Returns the seq
    // its next job takes, or nullopt when the chain changed since it was read.
    std::optional<int> restart(const ChainRow& chain, ChainEvent event, const std::string& reason,
        const std::optional<nlohmann::json>& spec = std::nullopt);
    // Deletes a chain that never had a job (its first sbatch was refused); false if it had one.
    bool deleteUnstartedChain(std::int64_t chainId);
    void setRetries(std::int64_t chainId, int retries);
    void setGeneration(std::int64_t chainId, int generation);
    void setResubmitRequested(std::int64_t chainId, bool requested);
    void setChainDir(std::int64_t chainId, const std::string& dir);
    void setSpec(std::int64_t chainId, const nlohmann::json& spec);

    // Writes the intent to submit job `seq`; false if one exists already (then nothing changes).
    bool recordIntent(std::int64_t chainId, int seq, const std::string& key, const std::string& reason);
    // For many chains at once, inside the caller's transaction: locks those still in their `from` state
    // and without a live submission of `seq`, moves them to successor_pending (their resubmit request
    // answered) and writes their intents (replacing a failed or cancelled one). Returns their specs and
    // the keys their intents got (a cancelled one's replacement gets a key of its own) by chain id.
    struct RecordedIntent {
        nlohmann::json spec;
        std::string key;
    };
    std::unordered_map<std::int64_t, RecordedIntent> recordIntents(const std::vector<IntentRequest>& requests);
    void markSubmitted(const std::string& key, std::int64_t slurmJobId);
    void markSubmission(std::int64_t chainId, int seq, const std::string& state, const std::string& error);
    std::optional<SubmissionRow> submission(std::int64_t chainId, int seq);
    void forgetSubmission(std::int64_t chainId, int seq); // a failed intent may be written anew

    // Inserts or updates the job row of `seq` from slurmctld's facts; upsertJobs a batch in one statement.
    void upsertJob(std::int64_t chainId, int seq, const ClusterJob& job);
    struct JobWrite {
        std::int64_t chainId = 0;
        int seq = 0;
        ClusterJob job;
    };
    // A job row the database did not take (a second live job of one seq, a value it refused), and why.
    struct RejectedJob {
        std::int64_t chainId = 0;
        std::int64_t slurmJobId = 0;
        std::string reason;
    };
    // The batch never fails for one chain's row: the rows refused are returned, the others written.
    std::vector<RejectedJob> upsertJobs(std::span<const JobWrite> writes);
    std::vector<JobRow> jobs(std::int64_t chainId);
    std::optional<JobRow> jobBySlurmId(std::int64_t slurmJobId, std::int64_t* chainId = nullptr);

    // Stores an event once per idempotency key; false for a duplicate.
    bool insertEvent(const std::string& key, const std::string& kind, const std::optional<std::string>& chain,
        std::optional<std::int64_t> jobId, const nlohmann::json& payload, std::int64_t senderUid);
    // How to ask a job's training to checkpoint and exit, from the plugin's step reports of the job's
    // latest run: through its steps when an srun step (numbered) started and none of its tasks has exited
    // yet, since srun answers TERM by force-terminating its step; else with `--full`, which reaches a program
    // the batch script runs itself.
    SignalScope checkpointSignalScope(std::int64_t slurmJobId);
    std::vector<EventRow> unprocessedEvents(int limit);
    void markProcessed(const std::vector<std::int64_t>& eventIds); // in one statement
    // An event whose data the database refused: processed, with the reason, never tried again.
    void deadLetter(std::int64_t eventId, const std::string& error);

    // A checkpoint reported by the plugin (a hint: used to show progress and to see training_done).
    void recordCheckpoint(std::int64_t chainId, std::optional<std::int64_t> jobId,
        const nlohmann::json& summary, const std::string& chainDir);
    std::optional<nlohmann::json> latestCheckpoint(
        std::int64_t chainId); // name, iteration, created_unix, training_done
    bool trainingDone(std::int64_t chainId);
    // Whether the chain was already paused because of this job (a decision 'pause' naming it).
    bool pausedForJob(std::int64_t chainId, std::int64_t slurmJobId);

    void recordDecision(std::int64_t chainId, const std::string& policy, const std::string& action,
        const nlohmann::json& inputs, const std::string& outcome);
    void recordDecisions(const std::string& policy, const std::vector<DecisionInput>& decisions); // in one
    // The queue wait predicted for a submitted job, and later what it really waited.
    // Marks the intents submitted and records their predictions, all in one statement.
    void recordSubmitted(const std::vector<SubmittedJob>& jobs);
    // Fills in the actual wait once; returns the prediction if there was one still open.
    std::optional<double> resolvePrediction(std::int64_t slurmJobId, double actualWaitSeconds);
    // signalledAt: the tick's clock (the queue snapshot's time), the same clock job end times come from.
    void startHandover(std::int64_t chainId, int generation, std::int64_t predecessor, std::int64_t successor,
        std::int64_t signalledAt);
    // Returns the seconds from the signal to `endTime`, if the handover was open.
    std::optional<double> completeHandover(std::int64_t chainId, int generation, std::int64_t endTime);
    std::optional<std::int64_t> handoverSignalledAt(std::int64_t chainId, int generation);
    // The handover signal as delivered: when scancel last succeeded (nullopt: never yet) and how often.
    struct HandoverSignal {
        std::optional<std::int64_t> sentAt;
        int attempts = 0;
    };
    HandoverSignal handoverSignal(std::int64_t chainId, int generation);
    void recordHandoverSignal(std::int64_t chainId, int generation, std::int64_t sentAt);

    // Cancelled chains whose jobs may still be queued or running, with the job ids and submission keys
    // of their current and next seq (see chains.withdraw_jobs).
    struct ChainToWithdraw {
        ChainRow chain;
        std::vector<std::int64_t> jobIds;
        std::vector<std::string> keys;
    };
    std::vector<ChainToWithdraw> chainsToWithdraw();
    void setWithdrawJobs(std::int64_t chainId, bool withdraw);

    // The live chains' states in id order, read through the live chains alone, and the highest chain id
    // given so far (ids only grow; 0 without chains), for the gauges.
    struct LiveStates {
        std::int64_t maxChainId = 0;
        std::vector<std::pair<std::int64_t, ChainState>> chains;
    };
    LiveStates liveStates();
    // Deletes up to `batch` processed events and `batch` decisions older than `retentionDays` (none with
    // 0), the oldest first, and the record of credentials past any credential's lifetime.
    struct Pruned {
        std::uint64_t events = 0, decisions = 0;
    };
    Pruned prune(int retentionDays, int batch);
    // Records a MUNGE credential as used (by its digest); false when any instance accepted it before.
    bool firstUseOfCredential(std::string_view credential);
    // How many chains each ended state has: this reads every chain ever run.
    std::vector<std::pair<ChainState, std::int64_t>> endedCounts();

    // The detail document of GET /v1/chains/{owner}/{name}.
    nlohmann::json detail(const ChainRow& chain);

    db::Connection& connection() { return connection_; }

private:
    db::Connection& connection_;
};

} // namespace baton::service
