#include "event.hpp"

#include "baton_version.h"
#include "chain_files.hpp"

#include <stdexcept>
#include <sys/wait.h>

namespace baton::spank {

nlohmann::json eventJson(const StepEvent& event)
{
    std::string key = std::to_string(event.jobId) + "." + event.step + "." + event.kind;
    if (event.task) {
        key += "." + std::to_string(*event.task);
    }
    nlohmann::json json = {
        { "version", eventVersion },
        { "kind", event.kind },
        { "idempotency_key", key },
        { "source", "spank_baton" },
        { "plugin_version", BATON_VERSION },
        { "job_id", event.jobId },
        { "step", event.step },
        { "chain", event.chain },
        { "chain_dir", event.chainDir },
        { "node", event.node },
        { "restart_count", event.restartCount },
        { "time_unix", event.timeUnix },
        { "deadline_unix", event.deadlineUnix ? nlohmann::json(*event.deadlineUnix) : nlohmann::json() },
    };
    if (event.task) {
        json["task"] = *event.task;
    }
    if (event.waitStatus) {
        const int status = *event.waitStatus;
        json["exit_status"] = WIFEXITED(status) ? nlohmann::json(WEXITSTATUS(status)) : nlohmann::json();
        json["signal"] = WIFSIGNALED(status) ? nlohmann::json(WTERMSIG(status)) : nlohmann::json();
    }
    if (event.checkpoint) {
        const auto& c = *event.checkpoint;
        json["checkpoint"] = { { "name", c.name }, { "iteration", c.iteration },
            { "created_unix", c.createdUnix }, { "total_bytes", c.totalBytes } };
        json["tuning"] = c.tuning;
    } else {
        json["checkpoint"] = nullptr;
        json["tuning"] = nullptr;
    }
    return json;
}

DeliveryResult deliverEvent(const nlohmann::json& event, const std::optional<HttpUrl>& url, int chainDirFd,
    std::chrono::milliseconds timeout)
{
    const std::string body = event.dump();
    DeliveryResult result;
    if (url) {
        const HttpResult posted = postJson(*url, eventsPath, body, timeout);
        if (posted.ok) {
            result.how = Delivery::Posted;
            return result;
        }
        result.postError = posted.error;
    }
    try {
        appendToSpool(chainDirFd, body, timeout);
    } catch (const std::exception& e) {
        throw std::runtime_error("event lost: " + (result.postError.empty() ? "" : result.postError + "; ")
            + "spool: " + e.what());
    }
    result.how = Delivery::Spooled;
    return result;
}

} // namespace baton::spank
