// The Slurm actions of one tick (sbatch of successors, the handover's scancel --signal), run so that one
// owner's slow calls hold up no one else's: each owner's actions one after another, in the order given,
// and different owners' at the same time on a bounded set of threads. A hung working directory, a child
// its owner stopped or a slow slurmctld answer for one owner costs the others nothing while threads are
// free, and at most one call's timeout when every thread is held. An action not started by the deadline
// is left undone, for the next tick; an owner whose call timed out starts nothing more this tick.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

namespace baton::service {

struct OwnerAction {
    std::int64_t ownerUid = 0;
    // Runs on a worker thread: only Slurm (a Cluster call), never the tick's database connection. What it
    // throws is kept in `error` for the tick thread, which records the outcome.
    std::function<void()> run;
    bool ran = false;
    std::exception_ptr error;
};

// Runs `actions` as said above with at most `threads` at once, none started after `deadline`, and returns
// when every started one has ended (each is bounded by its Slurm call's timeout). `timedOut(error)` tells
// whether a failure was a timeout (the owner's later actions then wait for the next tick).
void runPerOwner(std::vector<OwnerAction>& actions, std::size_t threads, std::chrono::steady_clock::time_point deadline,
    const std::function<bool(const std::exception_ptr&)>& timedOut);

} // namespace baton::service
