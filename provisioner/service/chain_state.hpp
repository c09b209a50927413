// The state machine of a chain: its states with their name table (the names are stored in chains.state),
// the events that move it, and one transition table that the tick and the HTTP API both consult, so that
// which state may follow which is written down once.
//
//   running ──policy submits successor──> successor_pending ──successor starts──> handover
//      ▲  │                                   │    │                                 │
//      │  └─job ended, no successor: resubmit─┘    └─successor withdrawn or          │
//      │                                             sbatch failed: back to running  │
//      └─────────────predecessor ended (or successor started after it)───────────────┘
//   successor_pending ──the policy queues a second successor behind the first──> successor_pending
//      (successors_in_flight = 2; when the first becomes the current job the second is its successor)
//   running, successor_pending, handover ──pause──> paused ──resume──> running
//   the current job ended and its owner submitted the next by hand: adopted, running
//   a chain whose step keeps failing ──> quarantined (reason kept) ──resume or resubmit──> running
//   training done ──> finished; retry budget spent ──> failed; cancel ──> cancelled
//   finished, failed, cancelled ──resubmit (or a new chain of the same name)──> running
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace baton::service {

// A value's name in one of the name tables below ("unknown" for a value the table lacks).
template<typename Enum, std::size_t N>
constexpr std::string_view nameIn(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value)
{
    for (const auto& [entry, name] : names)
        if (entry == value)
            return name;
    return "unknown";
}

enum class ChainState { Running, SuccessorPending, Handover, Paused, Quarantined, Finished, Failed, Cancelled };

inline constexpr std::array<std::pair<ChainState, std::string_view>, 8> chainStateNames { {
    { ChainState::Running, "running" },
    { ChainState::SuccessorPending, "successor_pending" },
    { ChainState::Handover, "handover" },
    { ChainState::Paused, "paused" },
    { ChainState::Quarantined, "quarantined" },
    { ChainState::Finished, "finished" },
    { ChainState::Failed, "failed" },
    { ChainState::Cancelled, "cancelled" },
} };

constexpr std::string_view nameOf(ChainState state)
{
    return nameIn(chainStateNames, state);
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

// What moves a chain: the tick's findings and what owners and operators ask for.
enum class ChainEvent {
    SubmitSuccessor, // the policy (or an ended job) starts the next job's submission
    QueueSecondSuccessor, // while the successor waits, the policy submits the job after it too
    SuccessorFound, // a live successor exists while the chain runs (e.g. after a resume)
    SuccessorWithdrawn, // the successor ended without running, or its sbatch failed
    SuccessorStarted, // the successor runs while the predecessor does: hand over
    PredecessorEnded, // the successor becomes the current job
    TrainingDone,
    RetryBudgetSpent,
    JobCancelledOutside, // the current job was cancelled by someone else than baton
    JobAdopted, // the owner submitted the next job by hand after the current one ended
    Quarantine, // the chain's own data or actions keep failing: stop it, keep the reason
    Pause,
    Resume,
    Cancel,
    Resubmit, // the next job now; an ended or quarantined chain runs again
    Preempt, // ask the current job to checkpoint and exit (no change of state)
};

inline constexpr std::array<std::pair<ChainEvent, std::string_view>, 16> chainEventNames { {
    { ChainEvent::SubmitSuccessor, "submit_successor" },
    { ChainEvent::QueueSecondSuccessor, "queue_second_successor" },
    { ChainEvent::SuccessorFound, "successor_found" },
    { ChainEvent::SuccessorWithdrawn, "successor_withdrawn" },
    { ChainEvent::SuccessorStarted, "successor_started" },
    { ChainEvent::PredecessorEnded, "predecessor_ended" },
    { ChainEvent::TrainingDone, "training_done" },
    { ChainEvent::RetryBudgetSpent, "retry_budget_spent" },
    { ChainEvent::JobCancelledOutside, "job_cancelled_outside" },
    { ChainEvent::JobAdopted, "job_adopted" },
    { ChainEvent::Quarantine, "quarantine" },
    { ChainEvent::Pause, "pause" },
    { ChainEvent::Resume, "resume" },
    { ChainEvent::Cancel, "cancel" },
    { ChainEvent::Resubmit, "resubmit" },
    { ChainEvent::Preempt, "preempt" },
} };

constexpr std::string_view nameOf(ChainEvent event)
{
    return nameIn(chainEventNames, event);
}

// A set of states, for the "from" column of the table.
class ChainStates {
public:
    constexpr ChainStates() = default;
    constexpr ChainStates(std::initializer_list<ChainState> states)
    {
        for (const ChainState state : states)
            bits_ |= bit(state);
    }
    constexpr bool contains(ChainState state) const { return (bits_ & bit(state)) != 0; }
    constexpr bool empty() const { return bits_ == 0; }

private:
    static constexpr std::uint32_t bit(ChainState state) { return 1u << static_cast<unsigned>(state); }
    std::uint32_t bits_ = 0;
};

struct ChainTransition {
    ChainEvent event;
    ChainStates from;
    std::optional<ChainState> to; // nullopt: the chain stays in its state
};

namespace detail {
using S = ChainState;
using E = ChainEvent;
inline constexpr ChainStates active { S::Running, S::SuccessorPending, S::Handover };
inline constexpr ChainStates ended { S::Finished, S::Failed, S::Cancelled };
} // namespace detail

// The whole state machine. Every compare-and-set of chains.state takes its allowed "from" states here.
inline constexpr std::array<ChainTransition, 16> chainTransitions { {
    { detail::E::SubmitSuccessor, { detail::S::Running }, detail::S::SuccessorPending },
    { detail::E::QueueSecondSuccessor, { detail::S::SuccessorPending }, std::nullopt },
    { detail::E::SuccessorFound, { detail::S::Running }, detail::S::SuccessorPending },
    { detail::E::SuccessorWithdrawn, { detail::S::SuccessorPending }, detail::S::Running },
    { detail::E::SuccessorStarted, { detail::S::SuccessorPending }, detail::S::Handover },
    { detail::E::PredecessorEnded, { detail::S::SuccessorPending, detail::S::Handover }, detail::S::Running },
    { detail::E::TrainingDone, detail::active, detail::S::Finished },
    { detail::E::RetryBudgetSpent, detail::active, detail::S::Failed },
    { detail::E::JobCancelledOutside, detail::active, detail::S::Paused },
    { detail::E::JobAdopted, { detail::S::Running, detail::S::Paused, detail::S::Quarantined }, detail::S::Running },
    { detail::E::Quarantine,
        { detail::S::Running, detail::S::SuccessorPending, detail::S::Handover, detail::S::Paused },
        detail::S::Quarantined },
    { detail::E::Pause, detail::active, detail::S::Paused },
    { detail::E::Resume, { detail::S::Paused, detail::S::Quarantined }, detail::S::Running },
    { detail::E::Cancel,
        { detail::S::Running, detail::S::SuccessorPending, detail::S::Handover, detail::S::Paused,
            detail::S::Quarantined },
        detail::S::Cancelled },
    { detail::E::Resubmit,
        { detail::S::Running, detail::S::Paused, detail::S::Quarantined, detail::S::Finished,
            detail::S::Failed, detail::S::Cancelled },
        detail::S::Running },
    { detail::E::Preempt, { detail::S::Running, detail::S::SuccessorPending }, std::nullopt },
} };

constexpr const ChainTransition& transitionFor(ChainEvent event)
{
    for (const ChainTransition& transition : chainTransitions)
        if (transition.event == event)
            return transition;
    return chainTransitions.back(); // unreachable: the table names every event (checked below)
}

// Whether `event` may happen to a chain in `state` (the one guard of the API and the tick).
constexpr bool isAllowed(ChainState state, ChainEvent event)
{
    return transitionFor(event).from.contains(state);
}

// The state `event` moves a chain in `state` to; nullopt when the event is not allowed there.
constexpr std::optional<ChainState> nextState(ChainState state, ChainEvent event)
{
    const ChainTransition& transition = transitionFor(event);
    if (!transition.from.contains(state))
        return std::nullopt;
    return transition.to.value_or(state);
}

namespace detail {
constexpr bool everyEventOnce()
{
    for (const auto& [event, name] : chainEventNames) {
        int rows = 0;
        for (const ChainTransition& transition : chainTransitions)
            rows += transition.event == event ? 1 : 0;
        if (rows != 1)
            return false;
    }
    return true;
}
static_assert(everyEventOnce(), "every chain event has exactly one row in chainTransitions");
} // namespace detail

} // namespace baton::service
