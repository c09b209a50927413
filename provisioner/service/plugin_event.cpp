#include "plugin_event.hpp"

#include "bounded_json.hpp"
#include "event_store.hpp"

#include "common/baton_contract.hpp"

#include <stdexcept>

namespace baton::service {

namespace {

using Json = nlohmann::json;

// A member that must be a non-empty string of at most `max` bytes.
std::string requiredText(const Json& document, const char* key, std::size_t max)
{
    const auto found = document.find(key);
    if (found == document.end() || !found->is_string() || found->get<std::string>().empty()
        || found->get<std::string>().size() > max)
        throw std::invalid_argument(std::string("'") + key + "' must be a non-empty string of at most "
            + std::to_string(max) + " bytes");
    return found->get<std::string>();
}

// The checkpoint summary an event reports, if it holds one.
std::optional<Json> checkpointOf(const Json& document)
{
    const auto checkpoint = document.find("checkpoint");
    if (checkpoint == document.end() || !checkpoint->is_object())
        return std::nullopt;
    return *checkpoint;
}

} // namespace

PluginEvent PluginEvent::posted(const Json& document)
{
    if (!document.is_object())
        throw std::invalid_argument("an event is a JSON object");
    const auto version = document.find("version");
    if (version == document.end() || !version->is_number_integer() || *version < 1 || *version > 2)
        throw std::invalid_argument("'version' must be 1 or 2");
    PluginEvent event;
    event.idempotencyKey = requiredText(document, "idempotency_key", 256);
    event.kind = requiredText(document, "kind", 64);
    event.chainName = requiredText(document, "chain", 256);
    const auto jobId = document.find("job_id");
    if (jobId == document.end() || !jobId->is_number_integer() || *jobId <= 0)
        throw std::invalid_argument("'job_id' must be a positive integer");
    event.jobId = jobId->get<std::int64_t>();
    return event;
}

std::optional<PluginEvent> PluginEvent::stored(const EventRow& row)
{
    if (!row.slurmJobId || !row.chainName || row.chainName->empty())
        return std::nullopt;
    if (!contract::validChainName(*row.chainName))
        throw std::invalid_argument("the chain name is not a valid one");
    PluginEvent event;
    event.kind = row.kind;
    event.chainName = *row.chainName;
    event.jobId = row.slurmJobId;
    event.chainDir = row.payload.value("chain_dir", std::string());
    event.checkpoint = checkpointOf(row.payload);
    return event;
}

std::optional<PluginEvent> PluginEvent::spooled(const std::string& line, int maxJsonDepth)
{
    const Json document = parseBoundedJson(line, maxJsonDepth);
    if (!document.is_object())
        return std::nullopt;
    PluginEvent event;
    event.checkpoint = checkpointOf(document);
    if (!event.checkpoint)
        return std::nullopt;
    const auto jobId = document.find("job_id");
    if (jobId != document.end() && jobId->is_number_integer())
        event.jobId = jobId->get<std::int64_t>();
    return event;
}

} // namespace baton::service
