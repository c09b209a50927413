// Runs a program without a shell: an argv vector, an explicit environment, bounded output, a timeout
// that ends the whole process group, and optionally other credentials (the privilege-separated helper
// that submits as a chain's owner).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace baton::slurm {

// Who the child runs as. Setting them needs root (CAP_SETUID/CAP_SETGID).
struct Credentials {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups; // supplementary groups; empty = none
};

// Clears every capability of the calling process (effective, permitted, inheritable, ambient); for a
// child that has dropped to a user's uid. Only raw system calls: safe after fork. False on failure.
bool clearCapabilities() noexcept;

struct CommandSpec {
    // argv[0] is the program's path; it is not looked up in PATH (the child's PATH is not ours).
    std::vector<std::string> argv;
    // "NAME=value" entries: the child's whole environment. Nothing of ours is inherited.
    std::vector<std::string> env;
    std::optional<std::filesystem::path> workdir;
    std::optional<Credentials> credentials;
    std::chrono::milliseconds timeout { 30'000 };
    // After the timeout the process group gets SIGTERM, then SIGKILL after this grace.
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
// cannot drop to the credentials, cannot enter workdir): nothing ran, so there is no result.
CommandResult runCommand(const CommandSpec& spec);

// The argv as one line for logs and errors, each element quoted when it needs to be.
std::string formatArgv(const std::vector<std::string>& argv);

// The first executable `name` in the colon-separated directory list `path` (e.g. $PATH), if any.
std::optional<std::filesystem::path> findProgram(const std::string& name, const std::string& path);

} // namespace baton::slurm
