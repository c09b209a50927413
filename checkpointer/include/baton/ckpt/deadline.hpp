// Wall-clock limits: when the final checkpoint must start so that it commits before the deadline.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

namespace baton::ckpt {

// Seconds since the epoch (UTC), as a double.
using Clock = std::function<double()>;
Clock systemClock();

inline constexpr double defaultDeadlineMargin = 60.0;
inline constexpr double defaultCheckpointSafetyFactor = 1.5;
inline constexpr double defaultDeadlineSlack = 1.0;

// Parses BATON_DEADLINE (epoch seconds, > 0) and BATON_DEADLINE_MARGIN (seconds, 0..86400, the
// contract's range). An empty or
// absent value gives nullopt; a malformed one throws std::invalid_argument naming the variable.
std::optional<double> parseDeadline(std::string_view name, const char* value);
std::optional<double> parseMargin(std::string_view name, const char* value);

// Plans the final checkpoint (SCR_Should_exit model). At each iteration boundary the training loop
// asks finalCheckpointDue(); the final checkpoint must start now if waiting one more iteration would
// let it commit later than deadline − margin:
//     now + Ti + f · (Tsnap + Ts) · (1 + in flight) + slack >= deadline − margin
// where f is the safety factor, a checkpoint already in flight must commit first, and the slack (1 s by
// default) absorbs a stalled iteration or a slow fsync on a busy node.
class DeadlinePlanner {
public:
    explicit DeadlinePlanner(Clock clock = systemClock());

    void setDeadline(std::optional<double> deadline) { deadline_ = deadline; }
    void setMargin(double seconds);
    void setSafetyFactor(double factor);
    void setSlack(double seconds);
    std::optional<double> deadline() const { return deadline_; }
    double margin() const { return margin_; }

    // Measured times: the planner keeps the largest checkpoint time it has seen (conservative).
    void observeIteration(double seconds);
    // persistSeconds: until the checkpoint is durable (with two levels, its drain included).
    void observeCheckpoint(double snapshotSeconds, double persistSeconds);
    double checkpointSeconds() const { return checkpoint_; }

    // True when the final checkpoint must start at this boundary and has not started yet.
    bool finalCheckpointDue(bool checkpointInFlight) const;
    // Seconds left until the final checkpoint must commit (deadline − margin − now); infinite without one.
    double secondsToCommitBy() const;

    void finalCheckpointStarted() { finalStarted_ = true; }
    void finalCheckpointCommitted() { finalCommitted_ = true; }
    void finalCheckpointFailed() { finalStarted_ = false; } // due again at the next boundary
    bool finalStarted() const { return finalStarted_; }
    bool shouldExit() const { return finalCommitted_; }

private:
    Clock clock_;
    std::optional<double> deadline_;
    double margin_ = defaultDeadlineMargin;
    double safety_ = defaultCheckpointSafetyFactor;
    double slack_ = defaultDeadlineSlack;
    double iteration_ = 0;
    double checkpoint_ = 0;
    bool finalStarted_ = false;
    bool finalCommitted_ = false;
};

} // namespace baton::ckpt
