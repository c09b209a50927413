// A live Slurm queue seen through QueueView, so that a live provisioner computes its features with the
// very code (features.cpp) its predictors were trained with in the simulator.
#pragma once

#include "queue_view.hpp"

#include "slurm/squeue_json.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace baton::slurm {

// Started jobs averaged for the recent mean wait, as the simulator's window (Simulator::waitWindow).
inline constexpr std::size_t recentStartsWindow = 100;

struct LiveQueueOptions {
    int totalNodes = 0; // nodes that can run jobs (SlurmClient::usableNodes() or configured); > 0
    // What planning assumes for a job without a time limit.
    std::int64_t unlimitedSeconds = 7 * 24 * 3600;
    std::size_t recentWindow = recentStartsWindow;
    std::size_t maxArrayTasks = 10000; // pending tasks counted per array record at most
};

// The waits of the last `window` jobs that started, kept across squeue snapshots. squeue shows a
// finished job only for MinJobAge seconds (600 in the shipped slurm.conf), while the simulator, and so
// the predictors' training and avg's rule, average the last `window` starts however long ago they were.
class RecentStarts {
public:
    explicit RecentStarts(std::size_t window = recentStartsWindow);
    // Remembers the starts in the snapshot not yet seen (a requeued job's new start is a new one).
    void add(const QueueSnapshot& snapshot);
    double meanWait() const; // 0 before any start
    std::size_t size() const { return waits_.size(); }

private:
    std::size_t window_;
    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> waits_; // (start, job id) -> wait
};

// A job's priority at a time. The default is the job's recordedPriority, which LiveQueue sets to
// Slurm's reported priority / 2^32-1; a job submitted now (recordedPriority 0) then ranks behind every
// pending job, as a fresh job does under FIFO or age-dominated multifactor priority.
using PriorityFunction = std::function<double(const sim::Job& job, std::int64_t at)>;

class LiveQueue final : public sim::QueueView {
public:
    // Pending: PENDING jobs that compete for nodes now (not held, not waiting for a dependency or a
    // begin time); a pending array record counts once per remaining task. Running: jobs that hold nodes.
    // The recent mean wait is `history`'s after adding the snapshot to it (a live provisioner keeps one
    // across ticks), or the snapshot's own starts' without one.
    LiveQueue(const QueueSnapshot& snapshot, const LiveQueueOptions& options, PriorityFunction priority = {},
        RecentStarts* history = nullptr);

    std::int64_t now() const override { return now_; }
    int freeNodes() const override { return freeNodes_; }
    std::span<const sim::PendingJob> pending() const override { return pending_; }
    std::span<const sim::RunningJob> running() const override { return running_; }
    double priorityOf(const sim::Job& job, std::int64_t at) const override;
    double recentMeanWait() const override { return recentMeanWait_; }

    // Slurm's 32-bit job priority mapped to [0, 1].
    static double normalisedPriority(std::int64_t slurmPriority);

private:
    std::int64_t now_ = 0;
    int freeNodes_ = 0;
    std::vector<sim::PendingJob> pending_;
    std::vector<sim::RunningJob> running_;
    double recentMeanWait_ = 0;
    PriorityFunction priority_;
};

// The tasks an array record's task string names ("0-9", "1,3,5-7", "0-99:2", "1-100%4"), at most `cap`.
std::size_t countArrayTasks(const std::string& tasks, std::size_t cap);

} // namespace baton::slurm
