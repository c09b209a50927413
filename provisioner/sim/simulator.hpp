// Event-driven replay of a job trace on a cluster of identical nodes with Slurm-like scheduling:
// multifactor priority (age, size, an optional recorded factor), FCFS plus EASY or conservative backfill
// on the requested limits (SchedulerConfig::backfill). A job held by a dependency ages from its submission,
// or only from its predecessor's end (SchedulerConfig::heldJobsAge). The whole state is a plain value, so a
// simulation forks by copying it: the evaluation protocol snapshots the base replay and runs one
// counterfactual per probe from there.
#pragma once

#include "scheduler_config.hpp"

#include "policy/queue_view.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace baton::sim {

// Jobs prepareTrace() dropped, by reason.
struct Dropped {
    std::size_t neverFit = 0; // larger than the simulated cluster: they could never start
    std::size_t invalid = 0; // no size or no limit
    std::size_t total() const { return neverFit + invalid; }
};

// Sorts by submit time (then id), the order the simulator needs, and drops jobs that can never run,
// so that none blocks the queue's head forever. Returns the number of jobs dropped; `dropped`, when
// given, gets them by reason.
std::size_t prepareTrace(std::vector<Job>& jobs, int clusterNodes, Dropped* dropped = nullptr);

class Simulator {
public:
    // `trace` must be prepared (sorted by submit, every job fits the cluster); it is shared, not copied.
    Simulator(std::shared_ptr<const std::vector<Job>> trace, SchedulerConfig config);

    // A copy that does not write to the start log: the way to run a counterfactual.
    Simulator fork() const;

    // Records every trace job's start time into `starts` (indexed like the trace; -1 = not started).
    void recordStartsInto(std::vector<std::int64_t>* starts) { startLog_ = starts; }

    // Adds a job submitted at job.submit (>= now()); its start is remembered for startOf().
    void submit(const Job& job);

    // Processes every event up to and including time t, then sets the clock to t.
    void advanceTo(std::int64_t t);
    // Advances event by event until the job with this id has started or the clock passes `horizon`.
    // Returns its start time, if it started.
    std::optional<std::int64_t> runUntilStarted(std::int64_t id, std::int64_t horizon);
    // Runs until no events remain.
    void runToEnd();

    // A running job ends at `t` (>= now()) instead of at its run time, if that is earlier: a chain's
    // predecessor exits at the handover, once its final checkpoint is persisted.
    void endRunningAt(std::int64_t id, std::int64_t t);

    std::optional<std::int64_t> startOf(std::int64_t id) const;
    // The limit an inserted job started with: its own, or less when backfill lowered it towards its
    // minLimit to start it before a reservation (Slurm's --time-min).
    std::optional<std::int64_t> grantedLimitOf(std::int64_t id) const;
    std::int64_t now() const { return now_; }
    int freeNodes() const { return freeNodes_; }
    const SchedulerConfig& config() const { return config_; }
    std::span<const PendingJob> pending() const { return pending_; }
    std::span<const RunningJob> running() const { return running_; }
    double priorityOf(const Job& job, std::int64_t at) const;
    // Mean queue wait of the most recent (up to 100) jobs that started, each from when it became
    // eligible (its predecessor's end for a job held by a dependency); 0 before any started.
    double recentMeanWait() const;
    std::int64_t nextEventTime() const;
    bool finished() const;

private:
    void processEventsAt(std::int64_t t);
    void schedule();
    // Starts jobs of order_ as Backfill::Easy (or None) does, and as Backfill::Conservative does.
    void startBehindFirstBlocked();
    void startByPlan();
    void start(const PendingJob& job, std::int64_t limit);
    bool overUserLimit(const Job& job) const;
    std::int64_t predecessorOf(const PendingJob& job) const; // its trace index, or -1
    bool waitsForDependency(const PendingJob& job) const;
    std::int64_t eligibleSince(const PendingJob& job) const; // where its age counts from
    std::int64_t dependencyMetAt(const PendingJob& job) const; // submission, or its predecessor's end
    double priority(const Job& job, std::int64_t ageSince, std::int64_t at) const;
    void countUser(std::int32_t user, int jobs, int units);

    std::shared_ptr<const std::vector<Job>> trace_;
    SchedulerConfig config_;
    std::int64_t now_ = 0;
    std::size_t nextArrival_ = 0;
    std::vector<Job> extraArrivals_; // inserted jobs not yet submitted, sorted by submit time
    std::vector<PendingJob> pending_; // in submit order
    std::vector<RunningJob> running_;
    int freeNodes_ = 0;
    // Per trace job: index of the job it waits for, or -1; shared by forks (it never changes).
    std::shared_ptr<const std::vector<std::int64_t>> afterIndex_;
    // Per trace job: when it ended, or -1; kept only when the trace has dependencies.
    std::vector<std::int64_t> endedAt_;
    std::vector<int> userJobs_, userUnits_; // running jobs and units per user (kept when limits are on)
    std::vector<std::int64_t>* startLog_ = nullptr;
    struct InsertedStart {
        std::int64_t id, start, limit;
    };
    std::vector<InsertedStart> insertedStarts_;
    const InsertedStart* insertedStart(std::int64_t id) const; // null if it has not started
    static constexpr std::size_t waitWindow = 100;
    std::array<double, waitWindow> recentWaits_ {};
    std::size_t recentCount_ = 0;
    double recentSum_ = 0;
    // Scratch space reused across scheduling passes (contents are meaningless between calls).
    std::vector<std::pair<double, std::uint32_t>> order_;
    std::vector<std::uint8_t> started_;
};

} // namespace baton::sim
