#include "event.hpp"

#include "baton_version.h"
#include "chain_files.hpp"
#include "common/munge_credential.hpp"
#include "credentials.hpp"

#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <sys/wait.h>
#include <vector>

namespace baton::spank {

namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json orNull(const std::optional<std::int64_t>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json();
}

// Encodings that missed their deadline. munged answers a local socket within milliseconds, but a hung
// one holds libmunge for about 10 s (its own retries); the report does not wait for that. A std::async
// future joins its thread when destroyed, so these are joined when the plugin is unloaded and no thread
// is left running code of an unloaded module.
struct LateEncodings {
    std::mutex mutex;
    std::vector<std::future<std::string>> pending;

    // False while an earlier encoding is still running: a hung munged gets one thread, not one per task.
    bool idle()
    {
        std::lock_guard lock(mutex);
        std::erase_if(pending,
            [](auto& late) { return late.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
        return pending.empty();
    }
    void keep(std::future<std::string> late)
    {
        std::lock_guard lock(mutex);
        pending.push_back(std::move(late));
    }
};

LateEncodings& lateEncodings()
{
    static LateEncodings late;
    return late;
}

// munge::encode, waiting until `deadline` at most. The thread inherits the caller's identity, which is
// what the credential states. Throws std::runtime_error.
std::string encodeBefore(std::string payload, Clock::time_point deadline, const std::string& socket)
{
    auto& late = lateEncodings();
    if (!late.idle()) {
        throw std::runtime_error("munged has not answered an earlier request yet");
    }
    auto credential = std::async(std::launch::async,
        [payload = std::move(payload), socket] { return munge::encode(payload, socket); });
    if (credential.wait_until(deadline) != std::future_status::ready) {
        late.keep(std::move(credential));
        throw std::runtime_error("munged did not answer in time");
    }
    return credential.get();
}

} // namespace

nlohmann::json eventJson(const StepEvent& event)
{
    const std::string key = std::to_string(event.jobId) + "." + std::to_string(event.requeueCount) + "."
        + event.node + "." + event.step + "." + event.kind;
    nlohmann::json json = {
        { "version", eventVersion },
        { "kind", event.kind },
        { "idempotency_key", key },
        { "source", "spank_baton" },
        { "plugin_version", BATON_VERSION },
        { "job_id", event.jobId },
        { "requeue_count", event.requeueCount },
        { "step", event.step },
        { "chain", event.chain },
        { "chain_dir", event.chainDir },
        { "node", event.node },
        { "seq", event.chainSeq },
        { "time_unix", event.timeUnix },
        { "deadline_unix", event.deadlineUnix ? nlohmann::json(*event.deadlineUnix) : nlohmann::json() },
    };
    json["tasks"] = event.tasks ? nlohmann::json(*event.tasks) : nlohmann::json();
    if (event.task) {
        json["task"] = *event.task;
    }
    if (event.tasksExited) {
        json["tasks_exited"] = *event.tasksExited;
    }
    if (event.waitStatus) {
        const int status = *event.waitStatus;
        json["exit_status"] = WIFEXITED(status) ? nlohmann::json(WEXITSTATUS(status)) : nlohmann::json();
        json["signal"] = WIFSIGNALED(status) ? nlohmann::json(WTERMSIG(status)) : nlohmann::json();
    }
    if (event.checkpoint) {
        const auto& c = *event.checkpoint;
        json["checkpoint"] = { { "name", c.name }, { "iteration", c.iteration },
            { "created_unix", c.createdUnix }, { "total_bytes", c.totalBytes }, { "final", c.final },
            { "training_done", c.trainingDone }, { "seq", orNull(c.chainSeq) }, { "job_id", orNull(c.jobId) },
            { "world_size", c.worldSize }, { "region_layouts", c.regionLayouts } };
        // Filtered again: a summary built by hand must not forward arbitrary structures either.
        json["tuning"] = filterTuning(c.tuning);
    } else {
        json["checkpoint"] = nullptr;
        json["tuning"] = nullptr;
    }
    if (event.localCheckpoint) {
        const auto& c = *event.localCheckpoint;
        json["local_checkpoint"] = { { "name", c.name }, { "iteration", c.iteration },
            { "created_unix", c.createdUnix }, { "final", c.final } };
    }
    return json;
}

SignedEvent signEvent(const nlohmann::json& event, const std::optional<HttpUrl>& url,
    Clock::time_point deadline, const std::string& mungeSocket)
{
    SignedEvent out;
    try {
        out.body = event.dump();
        if (!url) {
            return out;
        }
        const std::string payload = munge::requestPayload("POST", requestTarget(*url, eventsPath), out.body);
        out.authorization
            = std::string(munge::authorizationScheme) + encodeBefore(payload, deadline, mungeSocket);
    } catch (const std::exception& e) {
        out.authorization.clear();
        out.signError = e.what();
    }
    return out;
}

SignedEvent signEventAsRoot(const nlohmann::json& event, const std::optional<HttpUrl>& url,
    Clock::time_point deadline, const std::string& mungeSocket)
{
    if (!url) {
        return signEvent(event, url, deadline, mungeSocket); // nothing to sign
    }
    std::optional<ThreadRootCredentials> asRoot;
    try {
        asRoot.emplace();
    } catch (const std::exception& e) {
        SignedEvent out;
        try {
            out.body = event.dump();
        } catch (const std::exception&) { }
        out.signError = std::string("not signed as root: ") + e.what();
        return out;
    }
    // The encoding thread that signEvent starts inherits this thread's (root) identity.
    return signEvent(event, url, deadline, mungeSocket);
}

DeliveryResult deliverEvent(const SignedEvent& event, const std::optional<HttpUrl>& url, int chainDirFd,
    std::chrono::milliseconds postTimeout, std::chrono::milliseconds lockTimeout, DeliveryBreaker* breaker)
{
    DeliveryResult result;
    if (url && event.authorization.empty()) {
        result.postError
            = "not signed: " + (event.signError.empty() ? std::string("no credential") : event.signError);
    } else if (url && breaker && breaker->open(Clock::now())) {
        result.postError = "not tried: batond was unreachable moments ago";
    } else if (url) {
        const HttpResult posted = postJson(
            *url, eventsPath, event.body, postTimeout, { { "Authorization", event.authorization } });
        if (breaker) {
            if (posted.status == 0) {
                breaker->unreachable(Clock::now());
            } else {
                breaker->reachable();
            }
        }
        if (posted.ok) {
            result.how = Delivery::Posted;
            return result;
        }
        result.postError = posted.error;
    }
    try {
        appendToSpool(chainDirFd, event.body, lockTimeout);
    } catch (const std::exception& e) {
        throw std::runtime_error("event lost: " + (result.postError.empty() ? "" : result.postError + "; ")
            + "spool: " + e.what());
    }
    result.how = Delivery::Spooled;
    return result;
}

} // namespace baton::spank
