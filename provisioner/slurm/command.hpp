// Runs a program without a shell: an argv vector, an explicit environment, bounded output, a timeout
// that ends the whole process group, and optionally other credentials (the privilege-separated helper
// that submits as a chain's owner). A child that cannot be ended is never waited for: it is left to a
// reaper and the caller gets a timeout.
#pragma once

#include "common/run_as.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace baton::slurm {

// Who the child runs as (os::becomeOwner takes them in the child).
using Credentials = os::Credentials;

struct CommandSpec {
    // argv[0] is the program's path; it is not looked up in PATH (the child's PATH is not ours).
    std::vector<std::string> argv;
    // "NAME=value" entries: the child's whole environment. Nothing of ours is inherited.
    std::vector<std::string> env;
    std::optional<std::filesystem::path> workdir;
    std::optional<Credentials> credentials;
    std::chrono::milliseconds timeout { 30'000 };
    // After the timeout the process group gets SIGTERM, then SIGKILL after this grace; a child still
    // there one second after SIGKILL (or whose signals the kernel refused) is abandoned.
    std::chrono::milliseconds killGrace { 2'000 };
    // Bytes kept of each of stdout and stderr; the rest is read and dropped so the child never blocks.
    std::size_t maxOutputBytes = 1 << 20;
    // The child's standard input (e.g. a memfd holding a batch script); -1 = /dev/null. Borrowed.
    int stdinFd = -1;
};

struct CommandResult {
    int exitCode = -1; // the exit status, or -1 when a signal ended it
    int termSignal = 0; // the signal that ended it, 0 if it exited
    bool timedOut = false;
    // The child could not be ended (a kill refused with EPERM, or a process stuck in the kernel after
    // SIGKILL): it was left to the reaper, its status is unknown. Implies timedOut.
    bool abandoned = false;
    std::string out;
    std::string err;
    bool outTruncated = false;
    bool errTruncated = false;
    std::chrono::milliseconds elapsed { 0 };

    bool ok() const { return exitCode == 0 && !timedOut; }
    // "exit status 3", "killed by signal 9", "timed out after 5000 ms": for error messages.
    std::string describe() const;
};

// Runs spec.argv. Throws std::system_error when the program cannot be started at all (no such file,
// cannot drop to the credentials, cannot enter workdir): nothing ran, so there is no result. Returns
// at the latest about timeout + killGrace + 1 s after the start, whatever the child does.
CommandResult runCommand(const CommandSpec& spec);

// Children that could not be ended. batond must never wait for a child it cannot kill (it lacks
// CAP_KILL, or the child is stuck in the kernel on a dead file server): such a child is handed to the
// reaper, which collects it with waitpid(WNOHANG) whenever a later command runs, so it leaves neither
// a blocked caller nor, once it ends, a zombie.
//
// Hands `pid`, a child of this process that has not been waited for, to the reaper.
void abandonChild(pid_t pid);
// Collects the abandoned children that have ended; returns how many are still outstanding.
std::size_t reapAbandonedChildren() noexcept;
// How many children were abandoned since the process started (for metrics and logs).
std::uint64_t abandonedChildren() noexcept;

// Waits for the child `pid` (forked by this process) until `deadline`; then sends it SIGKILL (and its
// process group when `group`) and waits at most `grace` more. Returns its wait status, or nothing
// when it had to be abandoned: a refused kill (EPERM) abandons it at once. Never blocks past
// deadline + grace.
std::optional<int> awaitChild(
    pid_t pid, std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds grace, bool group);

// The argv as one line for logs and errors, each element quoted when it needs to be.
std::string formatArgv(const std::vector<std::string>& argv);

// The first executable `name` in the colon-separated directory list `path` (e.g. $PATH), if any.
std::optional<std::filesystem::path> findProgram(const std::string& name, const std::string& path);

} // namespace baton::slurm
