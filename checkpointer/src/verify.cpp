#include "verify.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "hash.hpp"

#include "io.hpp"

namespace baton::ckpt {

namespace {

constexpr std::size_t kReadChunk = 8 << 20;

struct StateDeleter {
    void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
};
using HashState = std::unique_ptr<XXH3_state_t, StateDeleter>;

// Walks the bytes of the file in order, feeding each entry's hash and checking gaps are zero.
class Checker {
public:
    explicit Checker(std::vector<const ManifestEntry*> sorted)
        : sorted_(std::move(sorted))
    {
        for (std::size_t i = 0; i < sorted_.size(); ++i) {
            states_.emplace_back(XXH3_createState());
            if (!states_.back())
                throw Error("out of memory for checksum state");
            XXH3_64bits_reset(states_.back().get());
        }
    }

    // Returns false (and sets reason) on a non-zero padding byte.
    bool feed(const std::byte* data, std::uint64_t start, std::size_t length, std::string& reason)
    {
        std::uint64_t end = start + length;
        std::uint64_t at = start;
        while (at < end) {
            while (next_ < sorted_.size() && sorted_[next_]->offset + sorted_[next_]->size <= at)
                ++next_;
            std::uint64_t entryStart
                = next_ < sorted_.size() ? sorted_[next_]->offset : std::numeric_limits<std::uint64_t>::max();
            if (at < entryStart) {
                std::uint64_t gapEnd = std::min(end, entryStart);
                const std::byte* p = data + (at - start);
                if (std::any_of(p, p + (gapEnd - at), [](std::byte b) { return b != std::byte { 0 }; })) {
                    reason = "non-zero padding byte between regions near offset " + std::to_string(at);
                    return false;
                }
                at = gapEnd;
                continue;
            }
            std::uint64_t segmentEnd = std::min(end, sorted_[next_]->offset + sorted_[next_]->size);
            hashSegment(next_, data + (at - start), at, segmentEnd);
            at = segmentEnd;
        }
        return true;
    }

    std::string mismatch() const
    {
        if (!chunkMismatch_.empty())
            return chunkMismatch_;
        for (std::size_t i = 0; i < sorted_.size(); ++i) {
            if (sorted_[i]->chunkBytes > 0)
                continue; // checked chunk by chunk
            std::uint64_t actual = XXH3_64bits_digest(states_[i].get());
            if (actual != sorted_[i]->checksum)
                return "checksum mismatch in '" + sorted_[i]->name + "' (stored "
                    + checksumHex(sorted_[i]->checksum) + ", read " + checksumHex(actual) + ")";
        }
        return {};
    }

private:
    // Bytes [at, end) of the file, all inside entry i; a chunked entry's chunks are checked as they end.
    void hashSegment(std::size_t i, const std::byte* data, std::uint64_t at, std::uint64_t end)
    {
        const ManifestEntry& entry = *sorted_[i];
        if (entry.chunkBytes == 0) {
            xxh3Update(states_[i].get(), data, end - at);
            return;
        }
        while (at < end) {
            const std::uint64_t position = at - entry.offset, chunk = position / entry.chunkBytes;
            const std::uint64_t chunkEnd = entry.offset + std::min((chunk + 1) * entry.chunkBytes, entry.size);
            const std::uint64_t length = std::min(end, chunkEnd) - at;
            xxh3Update(states_[i].get(), data, length);
            data += length;
            at += length;
            if (at != chunkEnd)
                continue;
            const std::uint64_t actual = XXH3_64bits_digest(states_[i].get());
            if (actual != entry.chunkChecksums[chunk] && chunkMismatch_.empty())
                chunkMismatch_ = "checksum mismatch in chunk " + std::to_string(chunk) + " of '" + entry.name + "' (stored "
                    + checksumHex(entry.chunkChecksums[chunk]) + ", read " + checksumHex(actual) + ")";
            XXH3_64bits_reset(states_[i].get());
        }
    }

    std::vector<const ManifestEntry*> sorted_;
    std::vector<HashState> states_;
    std::size_t next_ = 0;
    std::string chunkMismatch_;
};

std::size_t chunkLength(std::uint64_t position, std::uint64_t size)
{
    return std::min<std::uint64_t>(kReadChunk, io::roundUp(size - position, io::kDirectAlignment));
}

std::string checkThroughScratch(io::FileReader& reader, Checker& checker, std::uint64_t size,
    const std::filesystem::path& path, const ChunkSink& onChunk)
{
    io::AlignedBuffer scratch(std::min<std::uint64_t>(io::roundUp(size, io::kDirectAlignment), kReadChunk));
    std::string reason;
    for (std::uint64_t position = 0; position < size;) {
        std::size_t got = std::min<std::uint64_t>(
            reader.read(scratch.data(), chunkLength(position, size)), size - position);
        if (got == 0)
            return path.string() + " ended early at byte " + std::to_string(position);
        if (!checker.feed(scratch.data(), position, got, reason))
            return reason;
        if (onChunk)
            onChunk(scratch.data(), position, got);
        position += got;
    }
    return {};
}

// A reader thread fills `destination` sequentially while this thread checks what has arrived, so that
// hashing (and the caller's copying) hides behind the device's read time.
std::string checkPipelined(io::FileReader& reader, Checker& checker, std::byte* destination,
    std::uint64_t size, const std::filesystem::path& path, const ChunkSink& onChunk)
{
    std::mutex mutex;
    std::condition_variable arrived;
    std::uint64_t readUpTo = 0;
    bool readerDone = false;
    bool stop = false;
    std::string readError;
    // Two readers keep two requests in flight (as kernel read-ahead does); chunks are published to the
    // checker in file order.
    constexpr unsigned kReaders = 2;
    std::size_t chunks = static_cast<std::size_t>((size + kReadChunk - 1) / kReadChunk);
    std::vector<bool> chunkDone(chunks, false);
    std::size_t nextToPublish = 0;
    unsigned readersLeft = kReaders;
    auto readChunks = [&](unsigned first) {
        try {
            for (std::size_t chunk = first; chunk < chunks; chunk += kReaders) {
                if (std::lock_guard lock(mutex); stop)
                    break;
                std::uint64_t offset = static_cast<std::uint64_t>(chunk) * kReadChunk;
                std::size_t want = std::min<std::uint64_t>(kReadChunk, size - offset);
                std::size_t got = reader.readAt(destination + offset, offset, chunkLength(offset, size));
                if (got < want) {
                    std::lock_guard lock(mutex);
                    readError = path.string() + " ended early at byte " + std::to_string(offset + got);
                    break;
                }
                std::lock_guard lock(mutex);
                chunkDone[chunk] = true;
                while (nextToPublish < chunks && chunkDone[nextToPublish])
                    ++nextToPublish;
                readUpTo
                    = std::min<std::uint64_t>(static_cast<std::uint64_t>(nextToPublish) * kReadChunk, size);
                arrived.notify_all();
            }
        } catch (const std::exception& e) {
            std::lock_guard lock(mutex);
            readError = e.what();
        }
        std::lock_guard lock(mutex);
        readerDone = --readersLeft == 0;
        arrived.notify_all();
    };
    std::vector<std::thread> readers;
    for (unsigned r = 0; r < kReaders; ++r)
        readers.emplace_back(readChunks, r);

    std::string reason;
    std::uint64_t checked = 0;
    while (checked < size) {
        std::uint64_t available;
        {
            std::unique_lock lock(mutex);
            arrived.wait(lock, [&] { return readUpTo > checked || readerDone; });
            available = readUpTo;
            if (available <= checked) {
                reason = readError.empty() ? path.string() + " could not be read" : readError;
                break;
            }
        }
        std::size_t length = available - checked;
        if (!checker.feed(destination + checked, checked, length, reason))
            break;
        if (onChunk)
            onChunk(destination + checked, checked, length);
        checked = available;
    }
    {
        std::lock_guard lock(mutex);
        stop = true;
    }
    for (auto& r : readers)
        r.join();
    if (reason.empty() && !readError.empty())
        reason = readError;
    return reason;
}

// The entries of data file `file` sorted by offset, or the reason they cannot describe it.
std::string sortedEntries(
    const Manifest& manifest, const ManifestFile& file, std::vector<const ManifestEntry*>& sorted)
{
    sorted.clear();
    for (const auto* list : { &manifest.regions, &manifest.blobs }) {
        for (const auto& entry : *list) {
            if (manifest.formatVersion < kShardedFormatVersion && entry.file != kDataFileName)
                return "entry '" + entry.name + "' is in unknown file '" + entry.file + "'";
            if (entry.file == file.name)
                sorted.push_back(&entry);
        }
    }
    std::sort(sorted.begin(), sorted.end(), [](const ManifestEntry* a, const ManifestEntry* b) {
        // Empty entries may share an offset with the next one: they go first.
        return std::tie(a->offset, a->size) < std::tie(b->offset, b->size);
    });
    std::uint64_t expectedSize = 0;
    for (const auto* entry : sorted) {
        if (entry->offset < expectedSize)
            return "entries overlap at '" + entry->name + "'";
        expectedSize = entry->offset + entry->size; // parseManifest refused offset + size overflows
    }
    if (expectedSize != file.size)
        return (manifest.formatVersion < kShardedFormatVersion ? "total_bytes " : file.name + ": size ")
            + std::to_string(file.size) + " does not match the entries (" + std::to_string(expectedSize)
            + ")";
    return {};
}

const ManifestFile* findFile(const Manifest& manifest, const std::string& name)
{
    for (const auto& file : manifest.files) {
        if (file.name == name)
            return &file;
    }
    return nullptr;
}

} // namespace

std::string checkLayout(const std::filesystem::path& checkpointDir, const Manifest& manifest)
{
    for (const auto& file : manifest.files) {
        std::vector<const ManifestEntry*> sorted;
        if (std::string reason = sortedEntries(manifest, file, sorted); !reason.empty())
            return reason;
        auto path = checkpointDir / file.name;
        struct stat st { };
        if (::stat(path.c_str(), &st) != 0)
            return io::IoError(errno, "cannot stat " + path.string()).what();
        if (!S_ISREG(st.st_mode))
            return path.string() + " is not a regular file";
        if (static_cast<std::uint64_t>(st.st_size) != file.size)
            return path.string() + " has " + std::to_string(st.st_size) + " bytes, the manifest says "
                + std::to_string(file.size);
    }
    return {};
}

std::string readAndVerifyFile(const std::filesystem::path& checkpointDir, const Manifest& manifest,
    const std::string& fileName, std::byte* destination, bool directIo, const ChunkSink& onChunk)
{
    const ManifestFile* file = findFile(manifest, fileName);
    if (file == nullptr)
        return "the manifest lists no data file '" + fileName + "'";
    std::vector<const ManifestEntry*> sorted;
    if (std::string reason = sortedEntries(manifest, *file, sorted); !reason.empty())
        return reason;
    const std::uint64_t expectedSize = file->size;

    auto path = checkpointDir / file->name;
    try {
        io::FileReader reader(path, directIo);
        if (reader.size() != expectedSize)
            return path.string() + " has " + std::to_string(reader.size()) + " bytes, the manifest says "
                + std::to_string(expectedSize);
        Checker checker(std::move(sorted));
        std::string reason;
        if (destination != nullptr)
            reason = checkPipelined(reader, checker, destination, expectedSize, path, onChunk);
        else
            reason = checkThroughScratch(reader, checker, expectedSize, path, onChunk);
        return reason.empty() ? checker.mismatch() : reason;
    } catch (const io::IoError& e) {
        return e.what();
    }
}

std::string readAndVerify(const std::filesystem::path& checkpointDir, const Manifest& manifest,
    std::byte* destination, bool directIo, const ChunkSink& onChunk)
{
    if (destination != nullptr && manifest.files.size() != 1)
        return "internal: a checkpoint of several data files is read file by file";
    for (const auto& file : manifest.files) {
        if (std::string reason
            = readAndVerifyFile(checkpointDir, manifest, file.name, destination, directIo, onChunk);
            !reason.empty())
            return reason;
    }
    return {};
}

std::string readAndVerifyEntries(const std::filesystem::path& checkpointDir, const std::vector<EntryRead>& reads,
    bool directIo, ThreadPool& pool)
{
    std::map<std::string, std::unique_ptr<io::FileReader>> readers;
    std::mutex mutex;
    std::string failure;
    auto fail = [&](std::string reason) {
        std::lock_guard lock(mutex);
        if (failure.empty())
            failure = std::move(reason);
    };
    try {
        for (const auto& read : reads) {
            auto& reader = readers[read.entry->file];
            if (!reader)
                reader = std::make_unique<io::FileReader>(checkpointDir / read.entry->file, directIo);
        }
    } catch (const io::IoError& e) {
        return e.what();
    }
    {
        // Whole pages around each entry, in chunks; a chunk that ends early ends inside the file only if
        // the file is shorter than its manifest says.
        TaskGroup chunks(pool);
        for (const auto& read : reads) {
            const ManifestEntry& entry = *read.entry;
            const std::uint64_t first = entry.offset + read.begin, last = entry.offset + read.end;
            const std::uint64_t lead = first % io::kDirectAlignment;
            const std::uint64_t begin = first - lead;
            const std::uint64_t end = io::roundUp(last, io::kDirectAlignment);
            const io::FileReader& reader = *readers.at(entry.file);
            for (std::uint64_t at = begin; at < end; at += kReadChunk) {
                const std::size_t length = std::min<std::uint64_t>(kReadChunk, end - at);
                const std::uint64_t needed = std::min<std::uint64_t>(at + length, last) - at;
                std::byte* to = read.destination - lead + (at - begin);
                chunks.post([&, at, length, needed, to] {
                    try {
                        if (reader.readAt(to, at, length) < needed)
                            fail((checkpointDir / entry.file).string() + " ended early near byte "
                                + std::to_string(at + needed));
                    } catch (const std::exception& e) {
                        fail(e.what());
                    }
                });
            }
        }
    }
    if (!failure.empty())
        return failure;
    TaskGroup hashes(pool);
    for (const auto& read : reads) {
        const ManifestEntry& entry = *read.entry;
        auto check = [&fail, &entry](std::uint64_t stored, const std::byte* data, std::uint64_t size, const std::string& what) {
            const std::uint64_t actual = checksum(data, size);
            if (actual != stored)
                fail("checksum mismatch in " + what + "'" + entry.name + "' of " + entry.file + " (stored "
                    + checksumHex(stored) + ", read " + checksumHex(actual) + ")");
        };
        if (entry.chunkBytes == 0) {
            if (read.begin != 0 || read.end != entry.size) {
                fail("internal: part of the unchunked entry '" + entry.name + "' was read");
                continue;
            }
            hashes.post([=] { check(entry.checksum, read.destination, entry.size, ""); });
            continue;
        }
        for (std::uint64_t at = read.begin; at < read.end; at += entry.chunkBytes) {
            const std::uint64_t chunk = at / entry.chunkBytes;
            if (at % entry.chunkBytes != 0 || (read.end != entry.size && read.end % entry.chunkBytes != 0)) {
                fail("internal: a read of '" + entry.name + "' that is not whole chunks");
                break;
            }
            hashes.post([=] {
                check(entry.chunkChecksums[chunk], read.destination + (at - read.begin),
                    std::min(entry.chunkBytes, entry.size - at), "chunk " + std::to_string(chunk) + " of ");
            });
        }
    }
    hashes.wait();
    return failure;
}

} // namespace baton::ckpt
