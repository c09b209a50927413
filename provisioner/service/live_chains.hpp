// What a tick reads: every live chain with the rows of its current and next job, in one statement.
// A read across the chains, jobs, submissions, checkpoints and handovers tables, with the table stores'
// row readers.
#pragma once

#include "chain_store.hpp"
#include "handover_store.hpp"
#include "job_store.hpp"
#include "submission_store.hpp"

#include "db/connection.hpp"

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace baton::service {

// What one tick knows of a live chain: the chain (its spec left out: ChainStore::spec reads it when a job
// is submitted), the job rows and submissions of its current and next jobs, and whether a checkpoint said
// the training is done.
struct LiveChain {
    ChainRow chain;
    std::vector<JobRow> jobs; // of seq, seq + 1 and seq + 2
    // The submissions of seq, seq + 1 and seq + 2 (a second successor, queued while the first waits).
    std::optional<SubmissionRow> current, next, second;
    bool trainingDone = false;
    // Its newest checkpoint: when it was written (epoch seconds), its iteration and the job that wrote it.
    std::optional<double> newestCheckpointAt;
    std::optional<std::int64_t> newestCheckpointIteration, newestCheckpointJob;
    // Of a chain in handover: its handover's signal (read every tick, never cached).
    std::optional<HandoverStore::Signal> handoverSignal;
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

// Every live chain with what a tick reads of it, from one snapshot of the database, in one statement
// whatever the number of chains; the rows of a chain whose revision and seq are those in `cache` come
// from there.
std::vector<LiveChain> readLiveChains(db::Connection& connection, LiveChainCache& cache);

} // namespace baton::service
