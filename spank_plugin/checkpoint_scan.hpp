// Finds the newest committed checkpoint in a chain directory (docs/contracts.md: `ckpt-<iteration>`
// directories; a checkpoint exists if and only if its manifest.json does).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace baton::spank {

struct CheckpointSummary {
    std::string name; // e.g. ckpt-000000001200
    std::int64_t iteration = 0;
    double createdUnix = 0;
    std::int64_t totalBytes = 0;
    nlohmann::json tuning; // the manifest's tuning object, or null
};

// Reads manifests newest first and returns the first that parses with a supported format version.
// Symbolic links, non-regular manifests and manifests larger than 16 MiB are skipped. Runs with the
// caller's credentials; never throws for bad directory contents.
std::optional<CheckpointSummary> newestCheckpoint(int chainDirFd);

// Parses one manifest; throws std::runtime_error (or a JSON error) when it is not usable.
CheckpointSummary summarizeManifest(const std::string& name, const std::string& manifestText);

} // namespace baton::spank
