// batond's tables, one table store each, gathered over one borrowed connection (`tables.chains`, ...):
// chains with their state machine,
// submissions with idempotency keys (and the predictions made for them), jobs as slurmctld reported
// them, events and used credentials, checkpoints (hints), decisions and handovers. Each table's SQL,
// row type and column reader live in its own store; what reads across tables for a purpose does so in
// its own file (live_chains: the tick's read; chain_views: the API's documents).
#pragma once

#include "chain_store.hpp"
#include "checkpoint_store.hpp"
#include "decision_store.hpp"
#include "event_store.hpp"
#include "handover_store.hpp"
#include "job_store.hpp"
#include "submission_store.hpp"

#include "db/connection.hpp"

namespace baton::service {

struct Tables {
    explicit Tables(db::Connection& connection)
        : chains(connection)
        , submissions(connection)
        , jobs(connection)
        , events(connection)
        , credentials(connection)
        , checkpoints(connection)
        , decisions(connection)
        , handovers(connection)
        , connection_(connection)
    { }

    ChainStore chains;
    SubmissionStore submissions;
    JobStore jobs;
    EventStore events;
    CredentialStore credentials;
    CheckpointStore checkpoints;
    DecisionStore decisions;
    HandoverStore handovers;

    // For transactions that span the stores.
    db::Connection& connection() { return connection_; }

private:
    db::Connection& connection_;
};

} // namespace baton::service
