#include "baton/ckpt/reader.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "baton/ckpt/error.hpp"
#include "io.hpp"
#include "tensor_box.hpp"
#include "thread_pool.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace {

// The bytes of `entry`, read alone and verified.
std::vector<std::byte> readEntry(const std::filesystem::path& dir, const ManifestEntry& entry, ThreadPool& pool)
{
    // Page-aligned room around the entry, as readAndVerifyEntries reads whole pages.
    const std::uint64_t lead = entry.offset % io::kDirectAlignment;
    io::AlignedBuffer buffer(io::roundUp(lead + entry.size, io::kDirectAlignment) + io::kDirectAlignment);
    if (std::string reason = readAndVerifyEntries(dir, { { &entry, buffer.data() + lead, 0, entry.size } }, false, pool);
        !reason.empty())
        throw Error(reason);
    return { buffer.data() + lead, buffer.data() + lead + entry.size };
}

} // namespace

CheckpointReader::CheckpointReader(std::filesystem::path checkpointDir)
    : dir_(std::move(checkpointDir))
    , manifest_(parseManifest(io::readSmallFile(dir_ / kManifestName)))
    , pool_(std::make_unique<ThreadPool>(defaultCopyThreads()))
{
    if (std::string reason = checkLayout(dir_, manifest_); !reason.empty())
        throw Error(dir_.string() + ": " + reason);
}

CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;

std::vector<CheckpointReader::Region> CheckpointReader::regions() const
{
    std::map<std::string, Region> byName;
    for (const auto& entry : manifest_.regions) {
        Region& region = byName[entry.name];
        region.name = entry.name;
        region.bytes = entry.globalSize;
        if (entry.layout == kLayoutBox) {
            region.shape = entry.shape;
            region.elementSize = entry.elementSize;
        }
    }
    std::vector<Region> result;
    for (auto& [name, region] : byName)
        result.push_back(std::move(region));
    return result;
}

void CheckpointReader::readRegion(const std::string& name, std::span<std::byte> destination, int rank) const
{
    std::vector<const ManifestEntry*> entries;
    for (const auto& entry : manifest_.regions) {
        if (entry.name == name && (entry.layout != kLayoutRank || entry.rank == rank))
            entries.push_back(&entry);
    }
    if (entries.empty())
        throw Error(dir_.string() + " holds no region '" + name + "'" + (rank ? " of rank " + std::to_string(rank) : ""));
    const std::uint64_t bytes = entries.front()->globalSize;
    if (destination.size() != bytes)
        throw Error("region '" + name + "' has " + std::to_string(bytes) + " bytes, not " + std::to_string(destination.size()));
    // The whole region as the target piece, in the saved pieces' geometry.
    PieceGeometry whole = flatPiece(bytes, 0, bytes);
    const PieceGeometry first = savedPiece(*entries.front());
    if (entries.front()->layout == kLayoutBox)
        whole = inShapeOf(whole, first);
    const auto target = contiguousBoxes(whole);
    for (const auto* entry : entries) {
        if (entry->size == 0)
            continue;
        const auto copies = overlapCopies(contiguousBoxes(savedPiece(*entry)), target);
        if (copies.empty())
            continue;
        const auto data = readEntry(dir_, *entry, *pool_);
        for (const auto& copy : copies)
            std::memcpy(destination.data() + copy.to, data.data() + copy.from, copy.size);
    }
}

std::vector<std::byte> CheckpointReader::readBlob(const std::string& name, int rank) const
{
    for (const auto& entry : manifest_.blobs) {
        if (entry.name == name && entry.rank == rank)
            return readEntry(dir_, entry, *pool_);
    }
    throw Error(dir_.string() + " holds no blob '" + name + "' of rank " + std::to_string(rank));
}

} // namespace baton::ckpt
