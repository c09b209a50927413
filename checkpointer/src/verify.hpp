// Reads a checkpoint's data and checks it against its manifest in one streaming pass.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "baton/ckpt/manifest.hpp"
#include "thread_pool.hpp"

namespace baton::ckpt {

// Reads the data file of `manifest` (in `checkpointDir`) into `destination` (at least
// roundUp(totalBytes, 4096) bytes, page-aligned) or, if null, through a scratch buffer, and checks the
// file size, every entry's checksum and that padding between entries is zero. Returns an empty string
// when everything matches, else the reason.
//
// With a destination, reading runs on its own thread, one chunk ahead of checking. `onChunk` (optional)
// sees each chunk right after it was checked, before the whole file is known to be good; an exception
// it throws ends the read (an io::IoError becomes the returned reason, any other propagates).
// Checks, without reading data, that the manifest's entries lie in its data file without overlapping,
// that they add up to total_bytes and that the data file on disk has exactly that size. Returns an empty
// string when they do, else the reason. Nothing is allocated by the manifest's numbers before this passed.
std::string checkLayout(const std::filesystem::path& checkpointDir, const Manifest& manifest);

using ChunkSink = std::function<void(const std::byte* data, std::uint64_t fileOffset, std::size_t length)>;
std::string readAndVerify(const std::filesystem::path& checkpointDir, const Manifest& manifest,
    std::byte* destination, bool directIo, const ChunkSink& onChunk = {});
// One data file of the manifest (version 2 has one per rank); `destination` as above, for that file.
// readAndVerify() with a destination takes a manifest of one data file; without, it checks every file.
std::string readAndVerifyFile(const std::filesystem::path& checkpointDir, const Manifest& manifest,
    const std::string& fileName, std::byte* destination, bool directIo, const ChunkSink& onChunk = {});

// Bytes [begin, end) of one entry of a version 2 or 3 checkpoint, read alone: byte `begin` goes to
// `destination`, which lies ((entry offset + begin) mod 4096) bytes past a page boundary, with room up to
// the next page boundary after byte `end` (direct I/O reads whole pages). Only a chunked entry can be read
// in part, from a chunk's start to a chunk's end (or the entry's).
struct EntryRead {
    const ManifestEntry* entry = nullptr;
    std::byte* destination = nullptr;
    std::uint64_t begin = 0, end = 0;
};
// Reads every entry of `reads` from its data file in `checkpointDir`, chunks in parallel on `pool`, and
// checks each against its checksum: a rank of a multi-rank job reads only the entries it restores.
// Returns an empty string when all match, else the reason. The data files' sizes were checked before
// (checkLayout).
std::string readAndVerifyEntries(const std::filesystem::path& checkpointDir, const std::vector<EntryRead>& reads,
    bool directIo, ThreadPool& pool);

// The layout rule shared by writer and reader: where each entry may start.
inline constexpr std::size_t kEntryAlignment = 64;

} // namespace baton::ckpt
