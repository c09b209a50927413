// One checkpoint read directly, outside a training: its manifest, every region whole and every blob,
// each verified against its checksums. For tools (baton-ckpt, the export to other checkpoint formats);
// a training restores through Checkpointer::restore().
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "baton/ckpt/manifest.hpp"

namespace baton::ckpt {

class ThreadPool;

class CheckpointReader {
public:
    // Parses and checks the manifest of the checkpoint in `checkpointDir` and the sizes of its data
    // files; throws FormatError for a newer format, Error for anything else that is wrong.
    explicit CheckpointReader(std::filesystem::path checkpointDir);
    ~CheckpointReader();
    CheckpointReader(CheckpointReader&&) noexcept;

    struct Region {
        std::string name;
        std::uint64_t bytes = 0; // the whole region (a sharded one: all of its pieces)
        std::vector<std::uint64_t> shape; // a tensor piece's global shape; empty for a region without one
        std::uint64_t elementSize = 0; // 0 where the checkpoint does not say
    };
    const Manifest& manifest() const { return manifest_; }
    std::vector<Region> regions() const;
    // Region `name` whole, from the pieces of every rank that wrote it, into `destination` (exactly its
    // bytes). A per-rank region of a multi-rank checkpoint has one whole per rank: `rank` picks it.
    // Reads only the entries of that region; throws Error when one does not verify.
    void readRegion(const std::string& name, std::span<std::byte> destination, int rank = 0) const;
    // Blob `name` of rank `rank` (a single process's: 0), verified.
    std::vector<std::byte> readBlob(const std::string& name, int rank = 0) const;

private:
    std::filesystem::path dir_;
    Manifest manifest_;
    std::unique_ptr<ThreadPool> pool_; // reads an entry's chunks in parallel
};

} // namespace baton::ckpt
