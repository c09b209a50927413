// Events the plugin could not post wait in <chain dir>/.baton-spool/events.jsonl, a directory its owner
// can write. batond reads that file only through a child process that has dropped to the chain owner's
// uid and groups, opens every component with O_NOFOLLOW and reads a bounded number of bytes: a user
// cannot make batond read or remove anything the user could not read or remove themselves.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace baton::service {

// Moves the spool file aside and returns its lines (at most `maxBytes` in all). Throws
// std::runtime_error when the child cannot run or does not finish within `timeout` (a stalled file
// system, a collector its owner stopped); a missing spool is no lines. Never waits for the child much
// past the timeout: one that cannot be killed is left to the reaper (slurm::abandonChild).
std::vector<std::string> collectSpool(const std::string& chainDir, std::int64_t ownerUid,
    std::size_t maxBytes = 1 << 20, std::chrono::milliseconds timeout = std::chrono::seconds(10));

} // namespace baton::service
