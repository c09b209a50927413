// The files batond reads and writes in a chain directory, a directory its owner controls. batond touches
// them only through a child process that has dropped to the chain owner's uid and groups, opens every
// component with O_NOFOLLOW and moves a bounded number of bytes: a user cannot make batond read, write
// or remove anything the user could not themselves, and a stalled file system or a child its owner
// stopped costs the tick at most the timeout.
//   <chain dir>/.baton-spool/events.jsonl: events the plugin could not post, read and removed.
//   <chain dir>/.baton-handover-ended: the handover's end marker (common/baton_contract.hpp), written.
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

// batond's two files in a chain directory (common/baton_contract.hpp): the handover's request to the
// predecessor, and its end marker for the successor.
enum class HandoverFile { Request, Ended };

// Replaces that file with `text` (written to a temporary name, fsynced, renamed over the old one), as
// the owner. Throws std::runtime_error as collectSpool does, and when the chain directory is missing or
// the text is larger than the contract allows.
void writeHandoverFile(const std::string& chainDir, std::int64_t ownerUid, HandoverFile file,
    const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(5));

} // namespace baton::service
