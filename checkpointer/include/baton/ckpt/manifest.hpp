// The on-disk manifest (docs/contracts.md, format version 1): the commit point of a checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::ckpt {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kDataFileName = "data.bin";

// One region or blob: where its bytes are and what they hash to.
struct ManifestEntry {
    std::string name;
    std::string file;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    std::uint64_t checksum = 0; // XXH3-64 of the bytes
    int device = -1; // CUDA device the region lives on, -1 = host

    bool operator==(const ManifestEntry&) const = default;
};

struct Manifest {
    int formatVersion = kFormatVersion;
    std::uint64_t iteration = 0;
    std::uint64_t epoch = 0;
    double createdUnix = 0;
    std::uint64_t totalBytes = 0;
    std::vector<ManifestEntry> regions;
    std::vector<ManifestEntry> blobs;
    // Who wrote it and why (absent in older manifests: unknown / false).
    std::optional<std::uint64_t> jobId; // `job_id`: the writer's Slurm job
    std::optional<std::uint64_t> restartCount; // `restart_count`: the writer's BATON_RESTART_COUNT
    bool final = false; // `final`: the writer exited after it (deadline, SIGTERM, requested, finish)
    bool trainingDone = false; // `training_done`: the application declared the training complete
    nlohmann::json document; // the whole manifest, including sampler, tuning and any extra fields
};

std::string checksumHex(std::uint64_t checksum);
std::uint64_t checksum(const void* data, std::size_t size);

// Renders `document` (which must hold every required field) with a checksum over its own text, so
// that a change to any byte of the file is detected.
std::string renderManifest(const nlohmann::json& document);

// Parses and checks a manifest's text. Throws FormatError for a newer format version, Error for
// anything malformed or altered.
Manifest parseManifest(std::string_view text);

// The entries of `manifest` as JSON (the `regions` / `blobs` arrays).
nlohmann::json entriesToJson(const std::vector<ManifestEntry>& entries);

} // namespace baton::ckpt
