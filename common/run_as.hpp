// Running as a chain's owner: a child forked by batond (root, or a service user holding CAP_SETUID,
// CAP_SETGID and CAP_KILL) takes the owner's identity before it touches anything of theirs, whether it
// then executes a Slurm command or reads the owner's files itself.
#pragma once

#include <sys/types.h>

#include <optional>
#include <vector>

namespace baton::os {

// Who the child runs as. Taking them needs root (CAP_SETUID/CAP_SETGID).
struct Credentials {
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups; // supplementary groups; empty = none
};

// The credentials of the user `uid` from the user and group databases: resolved before fork, since the
// child of a process with threads may not read those databases (their locks may be held). Throws
// std::runtime_error for an unknown uid.
Credentials credentialsOf(uid_t uid);

// Clears every capability of the calling process (effective, permitted, inheritable, ambient); for a
// child that has dropped to a user's uid. Only raw system calls: safe after fork. False on failure.
bool clearCapabilities() noexcept;

// The step of becomeOwner that failed.
enum class DropStep : int { setgroups, setgid, setuid, verify };
// "setgroups failed for", ...: the start of an error message that names what was run.
const char* dropStepText(DropStep step) noexcept;

// In a child after fork: supplementary groups, then the gid, then the uid (after setuid the others could
// no longer change), every capability cleared, and checked that the ids took effect and root cannot be
// regained. Async-signal-safe. Returns the step that failed, with errno saying why, or nothing.
std::optional<DropStep> becomeOwner(const Credentials& owner) noexcept;

} // namespace baton::os
