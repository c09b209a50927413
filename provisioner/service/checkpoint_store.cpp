#include "checkpoint_store.hpp"

#include "common/baton_contract.hpp"

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace baton::service {

using Json = nlohmann::json;

namespace {

constexpr db::Statement insertCheckpointHint { "checkpoint_hint",
    "INSERT INTO checkpoints (chain_id, slurm_job_id, iteration, path, total_bytes, created_at, manifest,"
    " training_done, final) VALUES ($1, $2, $3, $4, $5, to_timestamp($6), $7, $8, $9)"
    " ON CONFLICT (chain_id, iteration) DO UPDATE SET training_done = checkpoints.training_done OR"
    " EXCLUDED.training_done, final = checkpoints.final OR EXCLUDED.final,"
    // A newer copy of the iteration (the training_done checkpoint a job commits of the iteration it
    // restored) names its writer; a late report of the older copy changes nothing.
    " slurm_job_id = CASE WHEN EXCLUDED.created_at > checkpoints.created_at THEN EXCLUDED.slurm_job_id"
    " ELSE checkpoints.slurm_job_id END,"
    " manifest = CASE WHEN EXCLUDED.created_at > checkpoints.created_at THEN EXCLUDED.manifest"
    " ELSE checkpoints.manifest END,"
    " created_at = GREATEST(checkpoints.created_at, EXCLUDED.created_at)",
    true };
constexpr db::Statement selectLatestCheckpoint { "checkpoint_latest",
    "SELECT iteration, path, extract(epoch FROM created_at) AS created_unix, training_done, final, slurm_job_id"
    " FROM checkpoints WHERE chain_id = $1 ORDER BY iteration DESC LIMIT 1",
    true };
constexpr db::Statement selectTrainingDone { "checkpoint_training_done",
    "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE chain_id = $1 AND training_done) AS done", true };

// What is kept of a report: the fields batond and its views use, each of its type, a bounded string at
// most; the rest of what the owner's manifest (a user's file) said is dropped, so that a row costs the
// database a few hundred bytes however large the report.
Json boundedSummary(const Json& summary)
{
    Json kept = Json::object();
    for (const char* key : { "iteration", "total_bytes", "created_unix", "job_id", "seq" })
        if (const auto found = summary.find(key); found != summary.end() && found->is_number())
            kept[key] = *found;
    for (const char* key : { "final", "training_done" })
        if (const auto found = summary.find(key); found != summary.end() && found->is_boolean())
            kept[key] = *found;
    for (const char* key : { "name", "node" })
        if (const auto found = summary.find(key); found != summary.end() && found->is_string()
            && found->get_ref<const std::string&>().size() <= 256)
            kept[key] = *found;
    if (const auto tuning = summary.find("tuning"); tuning != summary.end() && tuning->is_object()) {
        Json numbers = Json::object();
        for (const auto& [key, value] : tuning->items())
            if (value.is_number() && key.size() <= 64 && numbers.size() < 16)
                numbers[key] = value;
        kept["tuning"] = std::move(numbers);
    }
    return kept;
}

} // namespace

CheckpointStore::Recorded CheckpointStore::record(std::int64_t chainId, std::optional<std::int64_t> reporterJobId,
    const Json& summary, const std::string& chainDir)
{
    const auto number = [&](const char* key) -> std::optional<double> {
        const auto found = summary.find(key);
        return found != summary.end() && found->is_number() ? std::optional<double>(found->get<double>())
                                                            : std::nullopt;
    };
    const auto flag = [&](const char* key) {
        const auto found = summary.find(key);
        return found != summary.end() && found->is_boolean() && found->get<bool>();
    };
    // Each number was range-checked by the plugin that read it from the owner's manifest, and is again
    // here: an event is a hint from a user-writable file, and no value may overflow a conversion.
    const auto iteration = number("iteration");
    const auto bytes = number("total_bytes").value_or(0);
    const auto created = number("created_unix").value_or(0);
    const auto name = summary.find("name");
    if (!iteration || !contract::reportedIterationInRange(*iteration) || !contract::reportedBytesInRange(bytes)
        || !contract::reportedCreatedInRange(created) || name == summary.end() || !name->is_string()
        || !contract::parseCheckpointDirName(name->get_ref<const std::string&>()))
        throw std::invalid_argument("the checkpoint report's iteration, total_bytes, created_unix or name"
                                    " is missing or out of range");
    // Slurm's job ids are 32-bit; anything else in the manifest is no job, and the reporter stands in.
    const auto writer = summary.find("job_id");
    const bool writerNamed = writer != summary.end() && writer->is_number_integer() && *writer > 0
        && *writer <= std::numeric_limits<std::uint32_t>::max();
    const Recorded recorded { static_cast<std::int64_t>(*iteration),
        writerNamed ? std::optional(writer->get<std::int64_t>()) : reporterJobId, flag("training_done") };
    connection_.exec(insertCheckpointHint,
        db::Params(chainId, recorded.writerJobId, recorded.iteration, chainDir + "/" + name->get<std::string>(),
            static_cast<std::int64_t>(bytes), created, boundedSummary(summary), recorded.trainingDone, flag("final")));
    return recorded;
}

std::optional<CheckpointRow> CheckpointStore::latest(std::int64_t chainId)
{
    const db::Result r = connection_.exec(selectLatestCheckpoint, db::Params(chainId));
    if (r.rows() == 0)
        return std::nullopt;
    return CheckpointRow { r.int64(0, r.column("iteration")), std::string(r.text(0, r.column("path"))),
        r.real(0, r.column("created_unix")), r.boolean(0, r.column("training_done")),
        r.boolean(0, r.column("final")), r.optInt64(0, r.column("slurm_job_id")) };
}

bool CheckpointStore::trainingDone(std::int64_t chainId)
{
    const db::Result result = connection_.exec(selectTrainingDone, db::Params(chainId));
    return result.boolean(0, result.column("done"));
}

} // namespace baton::service
