// The plugin's events to batond (docs/contracts.md, "Events to batond"), and their delivery: HTTP POST
// first, the chain's spool file when batond cannot be reached, so that no event is lost.
#pragma once

#include "checkpoint_scan.hpp"
#include "http_client.hpp"

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace baton::spank {

inline constexpr int eventVersion = 2;
inline constexpr const char* eventsPath = "/v1/events";

struct StepEvent {
    std::string kind; // "step_start" or "task_exit"
    std::uint32_t jobId = 0;
    int requeueCount = 0; // SLURM_RESTART_COUNT: how often Slurm requeued the job
    std::string step; // "batch", "interactive" or the step number
    std::string chain;
    std::string chainDir;
    std::string node;
    int chainSeq = 0; // the job's position in its chain (BATON_CHAIN_SEQ)
    std::optional<std::int64_t> deadlineUnix;
    std::optional<std::uint32_t> tasks; // Slurm's task count of the step (an srun step's world size)
    // task_exit, one per step and node: the task whose end it reports (the first on this node that
    // failed or was killed, else the last to end), its raw wait status, and how many of the node's tasks
    // ended.
    std::optional<std::uint32_t> task;
    std::optional<int> waitStatus;
    std::optional<std::uint32_t> tasksExited;
    std::optional<CheckpointSummary> checkpoint;
    // Two-level storage: the newest node-local checkpoint (which may be ahead of `checkpoint`, the
    // chain directory's, while its drain runs or after it was cut short).
    std::optional<CheckpointSummary> localCheckpoint;
    double timeUnix = 0;
};

// The event as JSON (envelope version 2). idempotency_key is stable for the same job, requeue, node,
// step and kind (each is reported once per step and node), so that a resent or spooled duplicate is
// recognised by batond, while the same step of a requeued job or on another node is a new event.
nlohmann::json eventJson(const StepEvent& event);

// An event ready to post: its body and, when signing succeeded, the Authorization header bound to it.
struct SignedEvent {
    std::string body;
    std::string authorization; // "MUNGE <credential>"; empty if signing failed or there is no URL
    std::string signError; // why signing failed
};

// Serializes the event and signs the POST to url's /v1/events with a MUNGE credential of the calling
// thread (slurmstepd's callbacks use signEventAsRoot). Waits for munged until
// `deadline` at most; a munged that does not answer in time is left to finish on its own thread, and
// while it still has not, later calls fail at once. Never throws. `mungeSocket` empty: the default.
SignedEvent signEvent(const nlohmann::json& event, const std::optional<HttpUrl>& url,
    std::chrono::steady_clock::time_point deadline, const std::string& mungeSocket = {});

// signEvent as root, from any slurmstepd callback: the calling thread regains root for the signing
// (ThreadRootCredentials; slurm_spank_user_init runs with the job user's effective ids and saved uid
// 0) and returns to the ids it had. A thread that cannot become root gets a signError: an event signed
// as the job user would be refused by batond, a spooled one is still a hint. Never throws.
SignedEvent signEventAsRoot(const nlohmann::json& event, const std::optional<HttpUrl>& url,
    std::chrono::steady_clock::time_point deadline, const std::string& mungeSocket = {});

enum class Delivery { Posted, Spooled };

struct DeliveryResult {
    Delivery how = Delivery::Spooled;
    std::string postError; // why the POST failed (empty when posted or no URL configured)
};

// A circuit breaker for the reports of one slurmstepd: once a POST found batond unreachable (no HTTP
// answer before the deadline: name lookup, connect or timeout), the reports of the next `openFor` are
// spooled at once instead of each waiting for the whole report_timeout; the first report after that
// tries again. An HTTP answer, even an error status, means batond is reachable. slurmstepd calls the
// plugin's callbacks from one thread; the breaker is not synchronized.
class DeliveryBreaker {
public:
    explicit DeliveryBreaker(std::chrono::milliseconds openFor = std::chrono::seconds(60))
        : openFor_(openFor)
    { }
    bool open(std::chrono::steady_clock::time_point now) const { return openUntil_ && now < *openUntil_; }
    void unreachable(std::chrono::steady_clock::time_point now) { openUntil_ = now + openFor_; }
    void reachable() { openUntil_.reset(); }

private:
    std::chrono::milliseconds openFor_;
    std::optional<std::chrono::steady_clock::time_point> openUntil_;
};

// POSTs a signed event to `url` (unless it is empty, the event is unsigned: batond refuses those, or
// `breaker` is open) within `postTimeout`, else appends the body to the chain's spool (a plain JSON
// line; batond takes spooled events as hints only), waiting at most `lockTimeout` for its lock. Throws
// std::runtime_error only if both fail. Call with the job user's identity (the spool is theirs).
DeliveryResult deliverEvent(const SignedEvent& event, const std::optional<HttpUrl>& url, int chainDirFd,
    std::chrono::milliseconds postTimeout, std::chrono::milliseconds lockTimeout,
    DeliveryBreaker* breaker = nullptr);

} // namespace baton::spank
