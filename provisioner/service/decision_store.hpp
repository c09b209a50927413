// The `decisions` table: what batond (or a user through the API) decided for a chain, and what it saw.
#pragma once

#include "db/table_store.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::service {

// One decision of a tick, for recordMany.
struct DecisionInput {
    std::int64_t chainId = 0;
    std::string policy; // the policy that decides for the chain
    std::string action;
    nlohmann::json inputs;
    std::string outcome;
};

class DecisionStore : public db::TableStore {
public:
    using TableStore::TableStore;

    void record(std::int64_t chainId, const std::string& policy, const std::string& action,
        const nlohmann::json& inputs, const std::string& outcome);
    void recordMany(const std::vector<DecisionInput>& decisions); // in one statement
    // Whether the chain was already paused because of this job (a decision 'pause' naming it).
    bool pausedForJob(std::int64_t chainId, std::int64_t slurmJobId);
    // Deletes up to `batch` decisions older than `retentionDays`, the oldest first.
    std::uint64_t prune(int retentionDays, int batch);
};

} // namespace baton::service
