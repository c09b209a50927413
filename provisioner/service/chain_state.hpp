// The state machine of a chain, one enum with its name table (the names are stored in chains.state).
//
//   running ──policy submits successor──> successor_pending ──successor starts──> handover
//      ▲  │                                        │                                │
//      │  └─job ended, no successor: resubmit──────┘ (reactive or retry)           │
//      └──────────────predecessor ended (or successor started after it)───────────┘
//   any live state ──pause──> paused ──resume──> running
//   training done ──> finished; retry budget spent ──> failed; cancel ──> cancelled
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace baton::service {

enum class ChainState { Running, SuccessorPending, Handover, Paused, Finished, Failed, Cancelled };

inline constexpr std::array<std::pair<ChainState, std::string_view>, 7> chainStateNames { {
    { ChainState::Running, "running" },
    { ChainState::SuccessorPending, "successor_pending" },
    { ChainState::Handover, "handover" },
    { ChainState::Paused, "paused" },
    { ChainState::Finished, "finished" },
    { ChainState::Failed, "failed" },
    { ChainState::Cancelled, "cancelled" },
} };

constexpr std::string_view nameOf(ChainState state)
{
    for (const auto& [value, name] : chainStateNames)
        if (value == state)
            return name;
    return "unknown";
}

constexpr std::optional<ChainState> chainStateFromName(std::string_view name)
{
    for (const auto& [value, text] : chainStateNames)
        if (text == name)
            return value;
    return std::nullopt;
}

// A chain in a terminal state never changes again (a resubmit makes a failed chain run again).
constexpr bool isTerminal(ChainState state)
{
    return state == ChainState::Finished || state == ChainState::Failed || state == ChainState::Cancelled;
}

} // namespace baton::service
