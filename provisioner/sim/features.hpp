// Queue-state features for predicting how long a job submitted now would wait.
#pragma once

#include "simulator.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace baton::sim {

inline constexpr std::size_t featureCount = 15;
using Features = std::array<float, featureCount>;

// Names in the order of Features, stored with trained models.
extern const std::array<const char*, featureCount> featureNames;

struct JobShape {
    int nodes = 1;
    std::int64_t limit = 48 * 3600;
};

// What the features read of a queue: the simulator's state, or a live Slurm queue (LiveQueue in
// ../slurm) so that a live provisioner sees exactly the features its models were trained on.
class QueueView {
public:
    virtual ~QueueView() = default;
    virtual std::int64_t now() const = 0;
    virtual int freeNodes() const = 0;
    virtual std::span<const PendingJob> pending() const = 0; // job.submit, nodes, limit are read
    virtual std::span<const RunningJob> running() const = 0; // limitEnd and nodes are read
    // The scheduler's priority of a job at time `at`; a job submitted at `at` is asked too.
    virtual double priorityOf(const Job& job, std::int64_t at) const = 0;
    // Mean queue wait (seconds) of recently started jobs; 0 when none is known.
    virtual double recentMeanWait() const = 0;
};

// The state of `sim` at its current time, seen by a job of `shape` submitted now.
Features queueFeatures(const Simulator& sim, const JobShape& shape);
Features queueFeatures(const QueueView& queue, const JobShape& shape);

// The features of many shapes against one queue state: the queue is sorted once and jobs ahead are
// placed once, so a tick over many chains costs little more than one. Equal to queueFeatures() per
// shape up to float rounding of the node-hour sums, provided no two pending jobs share a priority
// (ties are ordered by pending position here, unspecified there).
std::vector<Features> queueFeatures(const QueueView& queue, std::span<const JobShape> shapes);

} // namespace baton::sim
