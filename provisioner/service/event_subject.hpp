// What processing a plugin event reads, in one statement: the chain its job belongs to and the facts that
// decide whether the job joins a chain; and that decision, made from the read alone (no database, no
// Slurm), so that each case is tested by itself. The read goes across the chains, jobs and submissions
// tables, with the chain store's row reader.
#pragma once

#include "chain_store.hpp"
#include "cluster.hpp"
#include "plugin_event.hpp"

#include "db/connection.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace baton::service {

struct EventSubject {
    // The chain that already holds the job; else, where the queue names the job's owner, that owner's
    // chain of the event's name (nullopt when there is none yet).
    std::optional<ChainRow> chain;
    bool jobKnown = false; // the job is one of a chain's jobs already
    bool currentEnded = true; // the chain's current job has ended, or has no row
    std::optional<std::string> nextSubmissionState; // of the chain's next seq, if one was started
};

// `ownerUid` is the job's owner as slurmctld reports it, nullopt when the job is not in the queue (then
// only a chain that already holds the job is found).
EventSubject readEventSubject(db::Connection& connection, std::int64_t slurmJobId,
    std::optional<std::int64_t> ownerUid, const std::string& chainName);

// How an event's job joins a chain.
enum class EventJoin {
    AsRead, // the job is the read chain's already, or joins none (where no chain was read, nothing happens)
    Register, // a chain begun with plain `sbatch --baton`: registered from the job, bound to its owner
    Adopt, // the chain's current job has ended and its owner submitted the next one by hand
};

// `job` is the event's job as the queue holds it (nullptr when it does not).
EventJoin joinOf(const PluginEvent& event, const ClusterJob* job, const EventSubject& subject);

} // namespace baton::service
