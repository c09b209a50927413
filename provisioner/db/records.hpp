// Rows of baton's tables as plain structs. Times are epoch seconds (UTC); JSON columns are
// nlohmann::json values. `id` fields are assigned by the database on insert.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace baton::db {

struct Chain {
    std::int64_t id = 0;
    std::string name;
    std::optional<std::string> chainDir;
    std::string state = "running"; // see provisioner/service/chain_state.hpp
    std::int64_t createdAt = 0;
};

struct Job {
    std::int64_t id = 0;
    std::int64_t chainId = 0;
    std::int64_t slurmJobId = 0;
    std::int32_t restartCount = 0;
    std::optional<std::string> name;
    std::optional<std::int64_t> submitTime;
    std::optional<std::int64_t> startTime;
    std::optional<std::int64_t> endTime;
    std::optional<std::int64_t> timeLimitSeconds;
    std::optional<std::int32_t> nodes;
    std::string state = "PENDING";
    std::optional<std::string> reason;
};

struct Checkpoint {
    std::int64_t id = 0;
    std::int64_t chainId = 0;
    std::optional<std::int64_t> slurmJobId;
    std::int64_t iteration = 0;
    std::int64_t epoch = 0;
    std::string path;
    std::int64_t totalBytes = 0;
    std::optional<double> snapshotSeconds;
    std::optional<double> persistSeconds;
    std::int64_t createdAt = 0;
    nlohmann::json manifest = nlohmann::json::object();
};

struct Event {
    std::int64_t id = 0;
    std::string idempotencyKey;
    std::string kind;
    std::optional<std::string> chainName;
    std::optional<std::int64_t> slurmJobId;
    nlohmann::json payload = nlohmann::json::object();
    std::int64_t receivedAt = 0;
};

struct Decision {
    std::int64_t id = 0;
    std::int64_t chainId = 0;
    std::int64_t decidedAt = 0;
    std::string policy;
    std::string action; // wait, submit, handover, cancel
    nlohmann::json inputs = nlohmann::json::object();
    std::optional<std::string> outcome;
};

struct Model {
    std::int64_t id = 0;
    std::string name;
    std::int32_t version = 1;
    std::string kind;
    std::optional<std::string> path;
    std::int64_t trainedAt = 0;
    nlohmann::json params = nlohmann::json::object();
    nlohmann::json metrics = nlohmann::json::object();
};

struct Prediction {
    std::int64_t id = 0;
    std::optional<std::int64_t> chainId;
    std::optional<std::int64_t> slurmJobId;
    std::optional<std::int64_t> modelId;
    std::int64_t predictedAt = 0;
    std::optional<double> quantile;
    double predictedWaitSeconds = 0;
    std::optional<double> actualWaitSeconds;
};

struct Tuning {
    std::int64_t chainId = 0;
    std::string profile;
    std::int32_t intervalK = 1;
    std::optional<double> iterationSeconds;
    std::optional<double> snapshotSeconds;
    std::optional<double> persistSeconds;
    std::optional<double> overheadPercent;
};

} // namespace baton::db
