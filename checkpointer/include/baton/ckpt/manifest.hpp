// The on-disk manifest (docs/contracts.md): the commit point of a checkpoint. Format version 1 is one
// process's checkpoint (one data file); version 2 is a multi-rank checkpoint (a data file per rank, each
// entry saying which rank wrote it and where its bytes lie in the region they belong to).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::ckpt {

inline constexpr int kFormatVersion = 1; // what a single process writes
inline constexpr int kShardedFormatVersion = 2; // what a job of several ranks writes
inline constexpr int kTensorFormatVersion = 3; // ... when a region is a piece of a tensor ("box")
inline constexpr int kMaxFormatVersion = 3; // the newest this library reads
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
    // Version 2 (version 1 reads as rank 0, "rank", at 0, globalSize = size): the rank that wrote the
    // entry; the region's layout ("rank": that rank's own bytes; "replicated" / "sharded": a piece of one
    // array of globalSize bytes that all ranks share); where the piece starts in that array.
    int rank = 0;
    std::string layout = "rank";
    std::uint64_t at = 0;
    std::uint64_t globalSize = 0;
    // Version 3, layout "box": a piece of a tensor of `shape` (elements of elementSize bytes): `size` bytes
    // of the elements of the box [boxOffset, boxOffset + boxLength), from element `first` in row-major
    // order. `at` is 0 and globalSize the tensor's bytes.
    std::vector<std::uint64_t> shape, boxOffset, boxLength;
    std::uint64_t elementSize = 0;
    std::uint64_t first = 0;
    // The whole box laid out at these element strides (a view into a padded buffer), its `size` bytes
    // spanning its first to its last element; empty: row-major.
    std::vector<std::uint64_t> strides;
    // Version 3, layout "box": checksums of the entry's chunks of chunkBytes (the last one shorter), so
    // that a rank reading part of a piece verifies the chunks it read; `checksum` is then the XXH3-64 of
    // the chunks' checksums (little-endian). chunkBytes 0: `checksum` covers the bytes alone.
    std::uint64_t chunkBytes = 0;
    std::vector<std::uint64_t> chunkChecksums;

    bool operator==(const ManifestEntry&) const = default;
};

// A data file of the checkpoint and the rank that wrote it.
struct ManifestFile {
    std::string name;
    int rank = 0;
    std::uint64_t size = 0;
};

inline constexpr const char* kLayoutRank = "rank";
inline constexpr const char* kLayoutReplicated = "replicated";
inline constexpr const char* kLayoutSharded = "sharded";
inline constexpr const char* kLayoutBox = "box";

struct Manifest {
    int formatVersion = kFormatVersion;
    std::uint64_t iteration = 0;
    std::uint64_t epoch = 0;
    double createdUnix = 0;
    std::uint64_t totalBytes = 0;
    std::vector<ManifestEntry> regions;
    std::vector<ManifestEntry> blobs;
    int worldSize = 1; // `world_size` (version 2): ranks that wrote it
    std::vector<ManifestFile> files; // version 1: data.bin alone
    // Who wrote it and why (absent in older manifests: unknown / false).
    std::optional<std::uint64_t> jobId; // `job_id`: the writer's Slurm job
    std::optional<std::uint64_t> chainSeq; // `seq` (`restart_count` before): the writer's BATON_CHAIN_SEQ
    bool final = false; // `final`: the writer exited after it (deadline, SIGTERM, requested, finish)
    bool trainingDone = false; // `training_done`: the application declared the training complete
    nlohmann::json document; // the whole manifest, including sampler, tuning and any extra fields
};

std::string checksumHex(std::uint64_t checksum);
std::uint64_t checksum(const void* data, std::size_t size);
// The chunk size a piece of `size` bytes is checksummed in: 4 MiB, more for pieces of over 4 GiB, so that
// a piece has at most 1,024 chunks.
std::uint64_t chunkBytesFor(std::uint64_t size);
// The checksum of each chunk of `data`, and the entry's checksum over them.
std::vector<std::uint64_t> chunkChecksums(const void* data, std::uint64_t size, std::uint64_t chunkBytes);
std::uint64_t checksumOfChunks(const std::vector<std::uint64_t>& chunks);

// Renders `document` (which must hold every required field) with a checksum over its own text, so
// that a change to any byte of the file is detected.
std::string renderManifest(const nlohmann::json& document);

// Parses and checks a manifest's text. Throws FormatError for a newer format version, Error for
// anything malformed or altered.
Manifest parseManifest(std::string_view text);

// The entries of `manifest` as JSON (the `regions` / `blobs` arrays); `sharded` adds the version 2 fields.
nlohmann::json entriesToJson(const std::vector<ManifestEntry>& entries, bool sharded = false);

// The name of rank `rank`'s data file in a version 2 checkpoint ("data-r3.bin").
std::string shardFileName(int rank);

// One rank's part of a version 2 checkpoint as the rank describes it to rank 0 ({"rank", "iteration",
// "file", "size", "regions", "blobs"}, entries with the version 2 fields): a manifest of that one data
// file, enough to read and verify it alone (two-level storage drains it before the whole manifest
// exists). Throws Error for a malformed description.
Manifest parseShardDescription(const nlohmann::json& shard, int worldSize);

} // namespace baton::ckpt
