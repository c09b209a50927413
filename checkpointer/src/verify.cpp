#include "verify.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <tuple>
#include <vector>

#include <xxhash.h>

#include "io.hpp"

namespace baton::ckpt {

namespace {

constexpr std::size_t kReadChunk = 32 << 20;

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
            XXH3_64bits_update(states_[next_].get(), data + (at - start), segmentEnd - at);
            at = segmentEnd;
        }
        return true;
    }

    std::string mismatch() const
    {
        for (std::size_t i = 0; i < sorted_.size(); ++i) {
            std::uint64_t actual = XXH3_64bits_digest(states_[i].get());
            if (actual != sorted_[i]->checksum)
                return "checksum mismatch in '" + sorted_[i]->name + "' (stored "
                    + checksumHex(sorted_[i]->checksum) + ", read " + checksumHex(actual) + ")";
        }
        return {};
    }

private:
    std::vector<const ManifestEntry*> sorted_;
    std::vector<HashState> states_;
    std::size_t next_ = 0;
};

} // namespace

std::string readAndVerify(const std::filesystem::path& checkpointDir, const Manifest& manifest,
    std::byte* destination, bool directIo)
{
    std::vector<const ManifestEntry*> sorted;
    for (const auto* list : { &manifest.regions, &manifest.blobs }) {
        for (const auto& entry : *list) {
            if (entry.file != kDataFileName)
                return "entry '" + entry.name + "' is in unknown file '" + entry.file + "'";
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
        expectedSize = entry->offset + entry->size;
    }
    if (expectedSize != manifest.totalBytes)
        return "total_bytes " + std::to_string(manifest.totalBytes) + " does not match the entries ("
            + std::to_string(expectedSize) + ")";

    auto path = checkpointDir / kDataFileName;
    try {
        io::FileReader reader(path, directIo);
        if (reader.size() != expectedSize)
            return path.string() + " has " + std::to_string(reader.size()) + " bytes, the manifest says "
                + std::to_string(expectedSize);
        Checker checker(std::move(sorted));
        io::AlignedBuffer scratch;
        if (destination == nullptr)
            scratch
                = io::AlignedBuffer(std::min(io::roundUp(expectedSize, io::kDirectAlignment), kReadChunk));
        std::string reason;
        std::uint64_t position = 0;
        while (position < expectedSize) {
            std::byte* target = destination != nullptr ? destination + position : scratch.data();
            std::size_t want = std::min<std::uint64_t>(
                kReadChunk, io::roundUp(expectedSize - position, io::kDirectAlignment));
            std::size_t got = reader.read(target, want);
            if (got == 0)
                return path.string() + " ended early at byte " + std::to_string(position);
            got = std::min<std::uint64_t>(got, expectedSize - position);
            if (!checker.feed(target, position, got, reason))
                return reason;
            position += got;
        }
        return checker.mismatch();
    } catch (const io::IoError& e) {
        return e.what();
    }
}

} // namespace baton::ckpt
