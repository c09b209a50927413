// Finds the newest committed checkpoint in a chain directory (docs/contracts.md: `ckpt-<iteration>`
// directories; a checkpoint exists if and only if its manifest.json does). Runs inside slurmstepd on
// files the job user controls, so every dimension of the work is bounded.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace baton::spank {

struct CheckpointSummary {
    std::string name; // e.g. ckpt-000000001200
    std::int64_t iteration = 0;
    double createdUnix = 0;
    std::int64_t totalBytes = 0;
    bool final = false; // the checkpoint written before its job exited
    bool trainingDone = false; // the application declared training complete
    std::optional<std::int64_t> chainSeq; // the writer's BATON_CHAIN_SEQ (`seq`, `restart_count` before)
    std::optional<std::int64_t> jobId; // the writer's BATON_JOB_ID
    nlohmann::json tuning; // the known finite numeric keys of the manifest's tuning object, or null
    // A multi-rank checkpoint (format version 2): the ranks that wrote it and how its regions are laid
    // out across them, e.g. {"replicated": 40, "rank": 2}. A single process's: 1 and null.
    std::int64_t worldSize = 1;
    nlohmann::json regionLayouts;
};

// What one scan may cost at most.
struct ScanLimits {
    std::size_t maxManifestBytes = 1u << 20;
    int maxDepth = 32; // JSON nesting of a manifest
    std::size_t maxCandidates = 8; // the newest `ckpt-<digits>` names that are read
    std::chrono::milliseconds timeLimit { 2000 }; // listing the directory and reading manifests
};

// Reads the manifests of the newest `limits.maxCandidates` checkpoint names, newest first, and returns
// the first that parses with a supported format version and whose reported numbers lie in the
// contract's ranges. Symbolic links, non-regular manifests, and manifests over the byte or depth limit
// are skipped; the scan stops at the time limit. Each manifest that was read but refused is added to
// `skipped` (when given) as "<name>: <reason>", for the caller to log. Runs with the caller's
// credentials; never throws for bad directory contents.
std::optional<CheckpointSummary> newestCheckpoint(
    int chainDirFd, const ScanLimits& limits = {}, std::vector<std::string>* skipped = nullptr);

// Parses one manifest (nesting deeper than `maxDepth` is refused while parsing, never recursed into);
// throws std::runtime_error (or a JSON error) when it is not usable: among others when `iteration`,
// `created_unix` or `total_bytes` is not a number in the contract's range (reportedIterationInRange,
// reportedCreatedInRange, reportedBytesInRange of common/baton_contract.hpp; iteration and total_bytes
// must be integers). seq (or, in an older manifest, restart_count) and job_id out of 0..2^53 are dropped.
CheckpointSummary summarizeManifest(
    const std::string& name, const std::string& manifestText, int maxDepth = 32);

// The known keys of a manifest's tuning object (interval, iteration_seconds, snapshot_seconds,
// persist_seconds, overhead_percent, stall_seconds) whose values are finite numbers; null if `tuning`
// is not an object.
nlohmann::json filterTuning(const nlohmann::json& tuning);

} // namespace baton::spank
