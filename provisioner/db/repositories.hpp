// One small repository per table: inserts and reads with prepared statements and bound parameters.
// Each borrows a Connection; none owns one.
#pragma once

#include "connection.hpp"
#include "records.hpp"

#include <optional>
#include <string_view>
#include <vector>

namespace baton::db {

// What every repository holds: the connection it borrows.
class Repository {
public:
    explicit Repository(Connection& connection)
        : connection_(connection)
    { }

protected:
    Connection& connection_;
};

class ChainRepository : public Repository {
public:
    using Repository::Repository;
    std::int64_t insert(const Chain& chain);
    std::optional<Chain> get(std::int64_t id);
    std::optional<Chain> findByName(std::string_view name);
    // Returns false if no chain has this id.
    bool setState(std::int64_t id, std::string_view state);
};

class JobRepository : public Repository {
public:
    using Repository::Repository;
    std::int64_t insert(const Job& job);
    std::optional<Job> get(std::int64_t id);
    std::optional<Job> findBySlurmId(std::int64_t slurmJobId);
    std::vector<Job> forChain(std::int64_t chainId);
    // Records start/end/state as Slurm reports them; false if the job is unknown.
    bool update(const Job& job);
};

class CheckpointRepository : public Repository {
public:
    using Repository::Repository;
    // Idempotent: a checkpoint reported twice (same chain and iteration) is stored once; returns its id.
    std::int64_t insert(const Checkpoint& checkpoint);
    std::optional<Checkpoint> get(std::int64_t id);
    std::optional<Checkpoint> latest(std::int64_t chainId);
};

class EventRepository : public Repository {
public:
    using Repository::Repository;
    // Returns false (and stores nothing) when an event with the same idempotency key exists.
    bool insert(const Event& event);
    std::optional<Event> findByKey(std::string_view idempotencyKey);
};

class DecisionRepository : public Repository {
public:
    using Repository::Repository;
    std::int64_t insert(const Decision& decision);
    std::optional<Decision> get(std::int64_t id);
    std::vector<Decision> forChain(std::int64_t chainId);
};

class ModelRepository : public Repository {
public:
    using Repository::Repository;
    std::int64_t insert(const Model& model);
    std::optional<Model> get(std::int64_t id);
    // The highest version of a model name.
    std::optional<Model> latest(std::string_view name);
};

class PredictionRepository : public Repository {
public:
    using Repository::Repository;
    std::int64_t insert(const Prediction& prediction);
    std::optional<Prediction> get(std::int64_t id);
    // Fills in the observed wait once the job started; false if the prediction is unknown.
    bool setActual(std::int64_t id, double actualWaitSeconds);
};

class TuningRepository : public Repository {
public:
    using Repository::Repository;
    // Insert or replace the chain's tuning state.
    void upsert(const Tuning& tuning);
    std::optional<Tuning> get(std::int64_t chainId);
};

} // namespace baton::db
