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

inline constexpr int eventVersion = 1;
inline constexpr const char* eventsPath = "/v1/events";

struct StepEvent {
    std::string kind; // "step_start" or "task_exit"
    std::uint32_t jobId = 0;
    std::string step; // "batch", "interactive" or the step number
    std::string chain;
    std::string chainDir;
    std::string node;
    int restartCount = 0;
    std::optional<std::int64_t> deadlineUnix;
    std::optional<std::uint32_t> task; // global task id, task events only
    std::optional<int> waitStatus; // raw wait status, task events only
    std::optional<CheckpointSummary> checkpoint;
    double timeUnix = 0;
};

// The event as JSON. idempotency_key is stable for the same job, step, kind and task, so that a resent
// or spooled duplicate is recognised by batond.
nlohmann::json eventJson(const StepEvent& event);

enum class Delivery { Posted, Spooled };

struct DeliveryResult {
    Delivery how = Delivery::Spooled;
    std::string postError; // why the POST failed (empty when posted or no URL configured)
};

// POSTs to `url` (unless it is empty) within `timeout`, else appends to the chain's spool. Throws
// std::runtime_error only if both fail.
DeliveryResult deliverEvent(const nlohmann::json& event, const std::optional<HttpUrl>& url, int chainDirFd,
    std::chrono::milliseconds timeout);

} // namespace baton::spank
