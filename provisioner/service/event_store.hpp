// The `events` table (what the plugin and batonctl reported, once per idempotency key, processed by the
// next tick) and `credentials_used` (the MUNGE credentials already accepted).
#pragma once

#include "cluster.hpp"

#include "db/table_store.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::service {

struct EventRow {
    std::int64_t id = 0;
    std::string kind;
    std::optional<std::string> chainName;
    std::optional<std::int64_t> slurmJobId;
    nlohmann::json payload;
};

class EventStore : public db::TableStore {
public:
    using TableStore::TableStore;

    // Stores an event once per idempotency key; false for a duplicate.
    bool insert(const std::string& key, const std::string& kind, const std::optional<std::string>& chain,
        std::optional<std::int64_t> jobId, const nlohmann::json& payload, std::int64_t senderUid);
    // Up to `limit` events not processed yet, taken fairly between jobs (see selectUnprocessed); each
    // job's in the order they came.
    std::vector<EventRow> unprocessed(int limit);
    void markProcessed(const std::vector<std::int64_t>& eventIds); // in one statement
    // An event whose data the database refused: processed, with the reason, never tried again.
    void deadLetter(std::int64_t eventId, const std::string& error);
    // How to ask a job's training to checkpoint and exit, from the plugin's step reports of the job's
    // latest run: through its steps when an srun step (numbered) started and none of its tasks has exited
    // yet, since srun answers TERM by force-terminating its step; else with `--full`, which reaches a program
    // the batch script runs itself.
    SignalScope checkpointSignalScope(std::int64_t slurmJobId);
    // Deletes up to `batch` processed events older than `retentionDays`, the oldest first.
    std::uint64_t prune(int retentionDays, int batch);
};

class CredentialStore : public db::TableStore {
public:
    using TableStore::TableStore;
    // Records a MUNGE credential as used, by the digest of its bytes (munge::credentialBytes); false when
    // any instance accepted it before.
    bool firstUse(std::string_view credentialBytes);
    // Forgets up to `batch` credentials past any credential's lifetime.
    void prune(int batch);
};

} // namespace baton::service
