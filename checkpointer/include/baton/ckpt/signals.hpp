// Opt-in handlers for SIGUSR1 (what Slurm's --signal sends) and SIGTERM (what Slurm sends at the time
// limit, KillWait seconds before SIGKILL). The handlers only set lock-free flags; the policy reads them
// at the next iteration boundary.
#pragma once

#include <csignal>

namespace baton::ckpt {

struct SignalRequests {
    bool checkpoint = false; // SIGUSR1 or SIGTERM arrived: checkpoint at this boundary
    bool terminate = false; // SIGTERM arrived: exit after that checkpoint commits
};

// Installs the handlers for the lifetime of the object and restores the previous ones when it goes
// away. Only one instance may exist at a time (the flags are process-wide); a second one throws
// std::logic_error. sigaction failures throw std::system_error.
class SignalHandlers {
public:
    explicit SignalHandlers(bool checkpointOnUsr1 = true, bool checkpointOnTerm = true);
    ~SignalHandlers();
    SignalHandlers(const SignalHandlers&) = delete;
    SignalHandlers& operator=(const SignalHandlers&) = delete;

    // Returns what arrived since the last call and clears the checkpoint flag; terminate stays set.
    SignalRequests take();
    // Without clearing anything.
    SignalRequests peek() const;

private:
    bool usr1_;
    bool term_;
    struct sigaction previousUsr1_ { };
    struct sigaction previousTerm_ { };
};

} // namespace baton::ckpt
