// The `checkpoints` table as batond sees it: the checkpoints the plugin reported (hints, used to show
// progress and to see that the training is done).
#pragma once

#include "db/table_store.hpp"

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace baton::service {

struct CheckpointRow {
    std::int64_t iteration = 0;
    std::string path;
    double createdAt = 0; // epoch seconds
    bool trainingDone = false;
    bool final = false;
    std::optional<std::int64_t> slurmJobId; // the job that wrote it
};

class CheckpointStore : public db::TableStore {
public:
    using TableStore::TableStore;

    // A checkpoint reported by the plugin: `summary` holds name, iteration, total_bytes, created_unix,
    // training_done, final and job_id (the job that wrote it, from its manifest). Any job of the chain may
    // report it: a successor reports its predecessor's final checkpoint as it starts, often before the
    // predecessor's own report arrives. The writer is therefore the manifest's job, and the reporting job
    // only where the manifest names none. Throws std::invalid_argument for a missing or out-of-range
    // value. Returns the iteration recorded, its writer and whether the report said the training is done.
    struct Recorded {
        std::int64_t iteration = 0;
        std::optional<std::int64_t> writerJobId;
        bool trainingDone = false;
    };
    Recorded record(std::int64_t chainId, std::optional<std::int64_t> reporterJobId,
        const nlohmann::json& summary, const std::string& chainDir);
    std::optional<CheckpointRow> latest(std::int64_t chainId);
    bool trainingDone(std::int64_t chainId);
};

} // namespace baton::service
