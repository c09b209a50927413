// The `chains` table: each chain with its state machine. Every state change is a compare-and-set
// (`UPDATE ... WHERE state = ... AND seq = ...`), so two instances or a restarted one can never both act
// on a stale view.
#pragma once

#include "chain_state.hpp"

#include "db/table_store.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::service {

struct ChainRow {
    std::int64_t id = 0;
    std::int64_t ownerUid = 0;
    std::string ownerName;
    std::string name;
    ChainState state = ChainState::Running;
    int seq = 0; // the current job's position in the chain (0 for the first job)
    int lastHandoverSeq = -1; // predecessor seq of the last handover
    int retries = 0;
    std::optional<std::string> reason;
    nlohmann::json spec; // how to submit the next job: script, sbatch_args, workdir (null where not read)
    std::optional<std::string> chainDir;
    bool resubmitRequested = false;
    bool preemptRequested = false; // `batonctl preempt`: the tick sends the current job TERM
    std::int64_t updatedAt = 0;
    std::string token; // in the keys of its submissions: unguessable by other users
    std::optional<std::string> policy; // its own provisioning policy; none: the service's
};

// The columns of a chain row in a result (those of chainColumns, and `spec` where the statement reads
// it), found by name once per result.
class ChainColumns {
public:
    explicit ChainColumns(const db::Result& result);
    ChainRow read(const db::Result& result, int row) const;

private:
    enum Column { Id, OwnerUid, OwnerName, Name, State, Seq, LastHandoverSeq, Retries, Reason, ChainDir,
        Resubmit, Preempt, Updated, Token, Policy, Count };
    static constexpr std::array<std::string_view, Count> names { "id", "owner_uid", "owner_name", "name",
        "state", "seq", "last_handover_seq", "retries", "reason", "chain_dir", "resubmit_requested",
        "preempt_requested", "updated_unix", "token", "policy" };
    std::array<int, Count> at_;
    int spec_; // -1 where the statement does not read it
};

// The select list that ChainColumns reads, of the table aliased `c` (the spec left out: see specColumn).
inline constexpr char chainColumns[]
    = "SELECT c.id, c.owner_uid, coalesce(c.owner_name, '') AS owner_name, c.name, c.state, c.seq,"
      " c.last_handover_seq, c.retries, c.reason, c.chain_dir, c.resubmit_requested, c.preempt_requested,"
      " extract(epoch FROM c.updated_at)::bigint AS updated_unix, c.token, c.policy";

class ChainStore : public db::TableStore {
public:
    using TableStore::TableStore;

    // Creates the chain unless (owner, name) exists; returns the chain either way.
    ChainRow create(std::int64_t ownerUid, const std::string& ownerName, const std::string& name,
        const std::optional<std::string>& chainDir, const nlohmann::json& spec,
        const std::optional<std::string>& policy = std::nullopt);
    std::optional<ChainRow> find(std::int64_t id);
    std::optional<ChainRow> find(std::int64_t ownerUid, const std::string& name);
    // Every chain, or the owner's; optionally only those in `state`; in id order, at most `limit` of them
    // after the id `afterId`.
    std::vector<ChainRow> list(std::optional<std::int64_t> ownerUid, std::optional<ChainState> state,
        std::int64_t afterId = 0, std::int64_t limit = std::numeric_limits<std::int64_t>::max());
    nlohmann::json spec(std::int64_t chainId);
    // The owner's chains in a state that is not terminal, wherever they came from (batonctl submit, a
    // plain `sbatch --baton`, a resubmitted or re-created ended chain): what max_live_chains_per_user caps.
    std::int64_t liveCount(std::int64_t ownerUid);
    // Compare-and-set through the state machine's table: `event` moves the chain from the state it had
    // when `chain` was read, fenced on that state and seq; false (and nothing written) when the table
    // does not allow the event there or the chain changed since.
    bool transition(const ChainRow& chain, ChainEvent event,
        const std::optional<std::string>& reason = std::nullopt);
    // The successor became the current job (PredecessorEnded, or a job its owner submitted by hand),
    // fenced like transition().
    bool advance(const ChainRow& chain, ChainEvent event);
    // An ended or quarantined chain runs again (event Resubmit): it continues after the highest seq its
    // jobs and submissions ever used, with a fresh retry budget, if given a new spec, and its checkpoints'
    // training_done forgotten (it trains again: one job that restores the done checkpoint does not end it).
    // Returns the seq its next job takes, or nullopt when the chain changed since it was read.
    std::optional<int> restart(const ChainRow& chain, ChainEvent event, const std::string& reason,
        const std::optional<nlohmann::json>& spec = std::nullopt);
    // Deletes a chain that never had a job (its first sbatch was refused); false if it had one.
    bool deleteUnstarted(std::int64_t chainId);
    void setRetries(std::int64_t chainId, int retries);
    void setLastHandoverSeq(std::int64_t chainId, int seq);
    void setResubmitRequested(std::int64_t chainId, bool requested);
    void setChainDir(std::int64_t chainId, const std::string& dir);
    // `batonctl preempt` asked (true), or the tick sent the TERM or found no job to send it to (false).
    void setPreemptRequested(std::int64_t chainId, bool requested);
    // The chain's own policy, or none to follow the service's (read by the next tick, in any state).
    void setPolicy(std::int64_t chainId, const std::optional<std::string>& policy);

    // Cancelled chains whose jobs may still be queued or running, with the job ids and submission keys
    // of their current and next seq (see chains.withdraw_jobs).
    struct ToWithdraw {
        ChainRow chain;
        std::vector<std::int64_t> jobIds;
        std::vector<std::string> keys;
    };
    std::vector<ToWithdraw> toWithdraw();
    void setWithdrawJobs(std::int64_t chainId, bool withdraw);

    // The live chains' states in id order, read through the live chains alone, and the highest chain id
    // given so far (ids only grow; 0 without chains), for the gauges.
    struct LiveStates {
        std::int64_t maxChainId = 0;
        std::vector<std::pair<std::int64_t, ChainState>> chains;
    };
    LiveStates liveStates();
    // How many chains each ended state has: this reads every chain ever run.
    std::vector<std::pair<ChainState, std::int64_t>> endedCounts();
};

} // namespace baton::service
