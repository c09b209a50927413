// Small files the plugin keeps in a chain directory: the job registry that yields the job's seq,
// and the event spool. Both are opened without following symbolic links, locked with flock while in
// use, and written with the caller's credentials (call them as the job user).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace baton::spank {

// Name of the registry: one Slurm job id per line, in the order the chain's jobs first started.
inline constexpr const char* jobRegistryName = ".baton-jobs";
inline constexpr const char* spoolDirName = ".baton-spool";
inline constexpr const char* spoolFileName = "events.jsonl";

// What reading the registry may cost at most. The file is the job user's and is read in slurmstepd
// under its lock, so every dimension is bounded; a chain of 100000 jobs fits easily.
struct RegistryLimits {
    std::size_t maxBytes = 1u << 20;
    std::size_t maxLines = 100000;
    std::chrono::milliseconds timeLimit { 2000 }; // reading, after the lock is taken
};

// Records `jobId` (decimal) in the registry if it is not there yet and returns how many distinct jobs
// of the chain started before it (its seq, the position in the chain). Every step of a job gets the
// same answer. Throws std::runtime_error, with a message naming the bound, for a registry over
// `limits` or with a line that is not a job id (the seq would be a guess; the step is refused with it).
int registerJob(int chainDirFd, std::string_view jobId, std::chrono::milliseconds lockTimeout,
    const RegistryLimits& limits = {});

// Appends one line (a newline is added) to <chain dir>/.baton-spool/events.jsonl, creating the spool
// directory (0700) and file (0600) if needed, and fsyncs it. Throws std::runtime_error.
void appendToSpool(int chainDirFd, std::string_view line, std::chrono::milliseconds lockTimeout);

} // namespace baton::spank
