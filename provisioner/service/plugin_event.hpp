// An event of the SPANK plugin about a job of a chain: posted to /v1/events, or spooled in the chain
// directory while batond could not be reached. Its JSON document is read here and nowhere else; the
// events table keeps a posted document whole as the event's payload.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace baton::service {

struct EventRow;

struct PluginEvent {
    std::string idempotencyKey;
    std::string kind; // step_start, task_exit, ...
    std::string chainName;
    std::optional<std::int64_t> jobId;
    std::string chainDir; // empty when the event names none
    std::optional<nlohmann::json> checkpoint; // the checkpoint it reports (a summary object), if any

    // A posted body, already parsed within the service's bounds: version 1 or 2, an idempotency key, a
    // kind, a chain name and a positive job id are required. Throws std::invalid_argument naming what is
    // wrong. The chain directory and checkpoint are read when the event is processed (stored()).
    static PluginEvent posted(const nlohmann::json& document);

    // An accepted event, as the events table holds it: nullopt for one that names no job or no chain.
    // Throws std::invalid_argument for a chain name that is not a valid one, and nlohmann's type_error
    // for a chain_dir that is not a string (the event is then set aside with that reason).
    static std::optional<PluginEvent> stored(const EventRow& row);

    // A line of a chain's spool, which the owner's jobs write: only a checkpoint report in it is used
    // (nullopt for any other line), with its job id when it names one. Throws std::invalid_argument for
    // a line that is not JSON within `maxJsonDepth` levels.
    static std::optional<PluginEvent> spooled(const std::string& line, int maxJsonDepth);
};

} // namespace baton::service
