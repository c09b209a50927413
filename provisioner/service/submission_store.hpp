// The `submissions` table (each job's submission with its idempotency key: intent, submitted, failed,
// cancelled) and the `predictions` made for the submitted jobs.
#pragma once

#include "chain_state.hpp"

#include "db/table_store.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::service {

struct SubmissionRow {
    int seq = 0;
    std::string key;
    std::string reason;
    std::string state; // intent, submitted, failed, cancelled
    std::optional<std::int64_t> slurmJobId;
    std::int64_t createdAt = 0;
    std::string error; // why sbatch failed, for a failed one
};

// The columns of a submission row in a result, found by name once; `prefix` where a statement reads
// several submissions in one row.
class SubmissionColumns {
public:
    explicit SubmissionColumns(const db::Result& result, std::string_view prefix = "");
    SubmissionRow read(const db::Result& result, int row) const;
    bool present(const db::Result& result, int row) const { return !result.isNull(row, at_[Seq]); }

private:
    enum Column { Seq, Key, Reason, State, SlurmJobId, Created, Error, Count };
    static constexpr std::array<std::string_view, Count> names { "seq", "idempotency_key", "reason", "state",
        "slurm_job_id", "created_unix", "error" };
    std::array<int, Count> at_;
};

// A chain that is to submit job `seq` (its current seq + 1, or seq + 2 behind a live seq + 1), if it is
// still in `from`.
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

class SubmissionStore : public db::TableStore {
public:
    using TableStore::TableStore;

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
    void markState(std::int64_t chainId, int seq, const std::string& state, const std::string& error);
    std::optional<SubmissionRow> find(std::int64_t chainId, int seq);
    // Marks the intents submitted and records their predicted waits, all in one statement.
    void recordSubmitted(const std::vector<SubmittedJob>& jobs);
    // Fills in the actual wait once; returns the prediction if there was one still open.
    std::optional<double> resolvePrediction(std::int64_t slurmJobId, double actualWaitSeconds);
};

} // namespace baton::service
