#include "baton/ckpt/manifest.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "baton/ckpt/error.hpp"
#include "common/baton_contract.hpp"
#include "hash.hpp"
#include "tensor_box.hpp"

namespace baton::ckpt {

namespace {

constexpr const char* kChecksumKey = "manifest_checksum";
constexpr const char* kPlaceholder = "0000000000000000";

// The top-level field as dump(2) writes it; the indentation tells it apart from a nested key of the
// same name inside a user field.
std::string checksumField(std::string_view value)
{
    return std::string("\n  \"") + kChecksumKey + "\": \"" + std::string(value) + "\"";
}

std::uint64_t parseHex(const std::string& text)
{
    if (text.size() != 16)
        throw Error("checksum '" + text + "' is not 16 hex digits");
    std::uint64_t value = 0;
    for (char c : text) {
        int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (digit < 0)
            throw Error("checksum '" + text + "' is not 16 lower-case hex digits");
        value = (value << 4) | static_cast<std::uint64_t>(digit);
    }
    return value;
}

template<typename T> T field(const nlohmann::json& object, const char* key, const char* where)
{
    auto it = object.find(key);
    if (it == object.end())
        throw Error(std::string(where) + ": field '" + key + "' is missing");
    try {
        return it->get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(std::string(where) + ": field '" + key + "' has the wrong type");
    }
}

} // namespace

PieceGeometry entryPiece(const ManifestEntry& entry)
{
    if (!entry.strides.empty())
        return stridedPiece(entry.shape, entry.elementSize, { entry.boxOffset, entry.boxLength }, entry.strides);
    return tensorPiece(entry.shape, entry.elementSize, { entry.boxOffset, entry.boxLength }, entry.first,
        entry.size / entry.elementSize);
}

PieceGeometry savedPiece(const ManifestEntry& entry)
{
    return entry.layout == kLayoutBox ? entryPiece(entry) : flatPiece(entry.globalSize, entry.at, entry.size);
}

namespace {

// Version 3's tensor piece: its shape, box and elements, checked against its size and its tensor's bytes.
void parseBox(const nlohmann::json& item, ManifestEntry& entry, const char* key)
{
    entry.shape = field<std::vector<std::uint64_t>>(item, "shape", key);
    entry.elementSize = field<std::uint64_t>(item, "element_size", key);
    entry.boxOffset = field<std::vector<std::uint64_t>>(item, "box_offset", key);
    entry.boxLength = field<std::vector<std::uint64_t>>(item, "box_length", key);
    entry.first = field<std::uint64_t>(item, "first", key);
    if (item.contains("strides"))
        entry.strides = field<std::vector<std::uint64_t>>(item, "strides", key);
    const std::string where = "manifest: tensor piece '" + entry.name + "'";
    if (entry.elementSize == 0 || entry.size % entry.elementSize != 0)
        throw Error(where + ": " + std::to_string(entry.size) + " bytes are not whole elements of "
            + std::to_string(entry.elementSize) + " bytes");
    try {
        (void)entryPiece(entry);
    } catch (const Error& e) {
        throw Error(where + ": " + e.what());
    }
    if (!entry.strides.empty()
        && (entry.first != 0 || entry.size != stridedSpan(entry.boxLength, entry.strides) * entry.elementSize))
        throw Error(where + ": a strided piece holds its whole box, spanning "
            + std::to_string(stridedSpan(entry.boxLength, entry.strides) * entry.elementSize) + " bytes");
    if (item.contains("chunk_bytes")) {
        entry.chunkBytes = field<std::uint64_t>(item, "chunk_bytes", key);
        const auto chunks = field<std::vector<std::string>>(item, "chunk_checksums", key);
        if (entry.chunkBytes == 0 || chunks.size() != (entry.size + entry.chunkBytes - 1) / entry.chunkBytes)
            throw Error(where + ": " + std::to_string(chunks.size()) + " chunk checksums for " + std::to_string(entry.size)
                + " bytes in chunks of " + std::to_string(entry.chunkBytes));
        for (const auto& text : chunks)
            entry.chunkChecksums.push_back(parseHex(text));
        if (checksumOfChunks(entry.chunkChecksums) != entry.checksum)
            throw Error(where + ": its checksum is not that of its chunks' checksums");
    }
    if (entry.at != 0 || entry.globalSize != volume(entry.shape) * entry.elementSize)
        throw Error(where + ": global_size " + std::to_string(entry.globalSize) + " is not the "
            + std::to_string(volume(entry.shape) * entry.elementSize) + " bytes of its shape");
}

std::vector<ManifestEntry> parseEntries(const nlohmann::json& document, const char* key, int version)
{
    const bool sharded = version >= kShardedFormatVersion;
    auto array = document.find(key);
    if (array == document.end() || !array->is_array())
        throw Error(std::string("manifest: '") + key + "' is missing or not an array");
    std::vector<ManifestEntry> entries;
    for (const auto& item : *array) {
        if (!item.is_object())
            throw Error(std::string("manifest: an entry of '") + key + "' is not an object");
        ManifestEntry entry;
        entry.name = field<std::string>(item, "name", key);
        entry.file = field<std::string>(item, "file", key);
        entry.offset = field<std::uint64_t>(item, "offset", key);
        entry.size = field<std::uint64_t>(item, "size", key);
        entry.checksum = parseHex(field<std::string>(item, "checksum", key));
        entry.device = field<int>(item, "device", key);
        if (entry.file.empty() || entry.file.find('/') != std::string::npos || entry.file == "..")
            throw Error("manifest: entry '" + entry.name + "' names an unsafe file '" + entry.file + "'");
        if (entry.offset > std::numeric_limits<std::uint64_t>::max() - entry.size)
            throw Error("manifest: entry '" + entry.name + "' has an impossible offset and size");
        entry.globalSize = entry.size;
        if (sharded) {
            entry.rank = field<int>(item, "rank", key);
            entry.layout = field<std::string>(item, "layout", key);
            entry.at = field<std::uint64_t>(item, "at", key);
            entry.globalSize = field<std::uint64_t>(item, "global_size", key);
            const bool box = entry.layout == kLayoutBox && version >= kTensorFormatVersion;
            if (entry.layout != kLayoutRank && entry.layout != kLayoutReplicated
                && entry.layout != kLayoutSharded && !box)
                throw Error("manifest: entry '" + entry.name + "' has unknown layout '" + entry.layout + "'");
            if (entry.at > entry.globalSize || entry.size > entry.globalSize - entry.at)
                throw Error("manifest: entry '" + entry.name + "' lies outside its region of "
                    + std::to_string(entry.globalSize) + " bytes");
            if (entry.layout == kLayoutRank && (entry.at != 0 || entry.globalSize != entry.size))
                throw Error("manifest: per-rank entry '" + entry.name + "' must cover its whole region");
            if (box)
                parseBox(item, entry, key);
        }
        entries.push_back(std::move(entry));
    }
    return entries;
}

std::optional<std::uint64_t> optionalWhole(const nlohmann::json& document, const char* key)
{
    auto it = document.find(key);
    if (it == document.end() || !it->is_number_unsigned())
        return std::nullopt;
    return it->get<std::uint64_t>();
}

bool flag(const nlohmann::json& document, const char* key)
{
    auto it = document.find(key);
    return it != document.end() && it->is_boolean() && it->get<bool>();
}

// Absent, null or mistyped values (another writer's) read as unknown / false.
void readHandoverFields(const nlohmann::json& document, Manifest& manifest)
{
    manifest.jobId = optionalWhole(document, "job_id");
    // Manifests written before the rename name the seq `restart_count`.
    manifest.chainSeq = document.contains(contract::kManifestSeqKey)
        ? optionalWhole(document, contract::kManifestSeqKey)
        : optionalWhole(document, contract::kLegacyManifestSeqKey);
    manifest.final = flag(document, "final");
    manifest.trainingDone = flag(document, "training_done");
}

} // namespace

std::string checksumHex(std::uint64_t value)
{
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
    return text;
}

std::uint64_t checksum(const void* data, std::size_t size)
{
    return xxh3(data, size);
}

std::uint64_t chunkBytesFor(std::uint64_t size)
{
    constexpr std::uint64_t kChunk = 4 << 20, kMostChunks = 1024;
    return std::max(kChunk, (size + kChunk * kMostChunks - 1) / (kChunk * kMostChunks) * kChunk);
}

std::vector<std::uint64_t> chunkChecksums(const void* data, std::uint64_t size, std::uint64_t chunkBytes)
{
    std::vector<std::uint64_t> chunks;
    for (std::uint64_t at = 0; at < size; at += chunkBytes)
        chunks.push_back(checksum(static_cast<const std::byte*>(data) + at, std::min(chunkBytes, size - at)));
    return chunks;
}

std::uint64_t checksumOfChunks(const std::vector<std::uint64_t>& chunks)
{
    std::vector<unsigned char> bytes;
    for (auto value : chunks) {
        for (int b = 0; b < 8; ++b)
            bytes.push_back(static_cast<unsigned char>(value >> (8 * b)));
    }
    return checksum(bytes.data(), bytes.size());
}

nlohmann::json entriesToJson(const std::vector<ManifestEntry>& entries, bool sharded)
{
    auto array = nlohmann::json::array();
    for (const auto& e : entries) {
        nlohmann::json item = { { "name", e.name }, { "file", e.file }, { "offset", e.offset },
            { "size", e.size }, { "checksum", checksumHex(e.checksum) }, { "device", e.device } };
        if (sharded) {
            item["rank"] = e.rank;
            item["layout"] = e.layout;
            item["at"] = e.at;
            item["global_size"] = e.globalSize;
            if (e.layout == kLayoutBox) {
                item["shape"] = e.shape;
                item["element_size"] = e.elementSize;
                item["box_offset"] = e.boxOffset;
                item["box_length"] = e.boxLength;
                item["first"] = e.first;
                if (!e.strides.empty())
                    item["strides"] = e.strides;
                if (e.chunkBytes > 0) {
                    item["chunk_bytes"] = e.chunkBytes;
                    auto chunks = nlohmann::json::array();
                    for (auto value : e.chunkChecksums)
                        chunks.push_back(checksumHex(value));
                    item["chunk_checksums"] = std::move(chunks);
                }
            }
        }
        array.push_back(std::move(item));
    }
    return array;
}

std::string shardFileName(int rank)
{
    return "data-r" + std::to_string(rank) + ".bin";
}

namespace {

// The pieces of a tensor: one shape and element size, and together exactly its elements. Two pieces
// that overlap are found by comparing every pair, for up to kPairChecked pieces; past that, the count
// alone is checked (a writer's own tiling, not a reader's safety, depends on it: a reader copies only
// bytes that lie inside both the piece and its own memory).
void checkTensorTiling(const std::string& name, const std::vector<const ManifestEntry*>& pieces)
{
    constexpr std::size_t kPairChecked = 256;
    const ManifestEntry& front = *pieces.front();
    std::uint64_t elements = 0;
    std::vector<std::vector<ContiguousBox>> parts;
    for (const auto* piece : pieces) {
        if (piece->layout != kLayoutBox || piece->shape != front.shape || piece->elementSize != front.elementSize)
            throw Error("manifest: the pieces of tensor '" + name + "' disagree on its layout, shape or element size");
        const PieceGeometry geometry = entryPiece(*piece);
        // Each holds at most the tensor's elements (parseBox), and there are few enough to add up.
        elements += geometry.count / front.elementSize;
        if (pieces.size() <= kPairChecked && geometry.count > 0)
            parts.push_back(contiguousBoxes(geometry));
    }
    if (elements * front.elementSize != front.globalSize)
        throw Error("manifest: the pieces of tensor '" + name + "' hold " + std::to_string(elements * front.elementSize)
            + " of its " + std::to_string(front.globalSize) + " bytes");
    for (std::size_t i = 0; i < parts.size(); ++i) {
        for (std::size_t j = i + 1; j < parts.size(); ++j) {
            if (overlaps(parts[i], parts[j]))
                throw Error("manifest: two pieces of tensor '" + name + "' overlap");
        }
    }
}

// Version 2: the files belong to ranks of the world, every entry lies in a listed file of its own rank,
// a per-rank region or blob appears once per rank, and the pieces of a shared region tile it exactly.
void checkShardedLayout(Manifest& manifest)
{
    const nlohmann::json& document = manifest.document;
    manifest.worldSize = field<int>(document, "world_size", "manifest");
    if (manifest.worldSize < 1)
        throw Error("manifest: world_size " + std::to_string(manifest.worldSize) + " is invalid");
    auto files = document.find("files");
    if (files == document.end() || !files->is_array())
        throw Error("manifest: 'files' is missing or not an array");
    std::map<std::string, int> rankOfFile;
    std::uint64_t total = 0;
    for (const auto& item : *files) {
        if (!item.is_object())
            throw Error("manifest: an entry of 'files' is not an object");
        ManifestFile file { field<std::string>(item, "name", "files"), field<int>(item, "rank", "files"),
            field<std::uint64_t>(item, "size", "files") };
        if (file.name.empty() || file.name.find('/') != std::string::npos || file.name == ".."
            || file.name == "." || file.name == kManifestName)
            throw Error("manifest: unsafe data file name '" + file.name + "'");
        if (file.rank < 0 || file.rank >= manifest.worldSize)
            throw Error("manifest: file '" + file.name + "' belongs to rank " + std::to_string(file.rank)
                + " outside the world of " + std::to_string(manifest.worldSize));
        if (!rankOfFile.emplace(file.name, file.rank).second)
            throw Error("manifest: file '" + file.name + "' is listed twice");
        if (file.size > std::numeric_limits<std::uint64_t>::max() - total)
            throw Error("manifest: file sizes overflow");
        total += file.size;
        manifest.files.push_back(std::move(file));
    }
    if (total != manifest.totalBytes)
        throw Error("manifest: total_bytes " + std::to_string(manifest.totalBytes)
            + " is not the sum of the file sizes (" + std::to_string(total) + ")");
    std::set<std::tuple<std::string, int>> perRank[2];
    std::set<std::string> perRankRegions;
    std::map<std::string, std::vector<const ManifestEntry*>> shared;
    int list = 0;
    for (const auto* entries : { &manifest.regions, &manifest.blobs }) {
        for (const auto& entry : *entries) {
            auto file = rankOfFile.find(entry.file);
            if (file == rankOfFile.end())
                throw Error("manifest: entry '" + entry.name + "' is in unlisted file '" + entry.file + "'");
            if (file->second != entry.rank)
                throw Error("manifest: entry '" + entry.name + "' of rank " + std::to_string(entry.rank)
                    + " is in rank " + std::to_string(file->second) + "'s file");
            if (entry.layout == kLayoutRank) {
                if (list == 0)
                    perRankRegions.insert(entry.name);
                if (!perRank[list].emplace(entry.name, entry.rank).second)
                    throw Error("manifest: '" + entry.name + "' appears twice for rank "
                        + std::to_string(entry.rank));
            } else if (list == 1) {
                throw Error("manifest: blob '" + entry.name + "' must be per-rank");
            } else {
                shared[entry.name].push_back(&entry);
            }
        }
        ++list;
    }
    for (auto& [name, pieces] : shared) {
        if (perRankRegions.contains(name))
            throw Error("manifest: region '" + name + "' is both per-rank and shared");
        if (pieces.front()->layout == kLayoutBox) {
            checkTensorTiling(name, pieces);
            continue;
        }
        std::sort(pieces.begin(), pieces.end(), [](const ManifestEntry* a, const ManifestEntry* b) {
            return std::tie(a->at, a->size) < std::tie(b->at, b->size);
        });
        std::uint64_t covered = 0;
        for (const auto* piece : pieces) {
            if (piece->layout != pieces.front()->layout || piece->globalSize != pieces.front()->globalSize)
                throw Error("manifest: the pieces of region '" + name + "' disagree on its layout or size");
            if (piece->size == 0)
                continue;
            if (piece->at != covered)
                throw Error("manifest: the pieces of region '" + name + "' leave a gap or overlap at byte "
                    + std::to_string(std::min(piece->at, covered)));
            covered += piece->size;
        }
        if (covered != pieces.front()->globalSize)
            throw Error("manifest: the pieces of region '" + name + "' cover " + std::to_string(covered)
                + " of " + std::to_string(pieces.front()->globalSize) + " bytes");
    }
}

} // namespace

Manifest parseShardDescription(const nlohmann::json& shard, int worldSize)
{
    if (!shard.is_object())
        throw Error("shard description: not a JSON object");
    Manifest manifest;
    manifest.formatVersion = kShardedFormatVersion;
    manifest.worldSize = worldSize;
    manifest.iteration = field<std::uint64_t>(shard, "iteration", "shard description");
    ManifestFile file { field<std::string>(shard, "file", "shard description"),
        field<int>(shard, "rank", "shard description"), field<std::uint64_t>(shard, "size", "shard description") };
    if (file.name.empty() || file.name.find('/') != std::string::npos || file.name == "..")
        throw Error("shard description: unsafe file name '" + file.name + "'");
    if (file.rank < 0 || file.rank >= worldSize)
        throw Error("shard description: rank " + std::to_string(file.rank) + " outside the world");
    manifest.totalBytes = file.size;
    manifest.files.push_back(std::move(file));
    manifest.regions = parseEntries(shard, "regions", kTensorFormatVersion);
    manifest.blobs = parseEntries(shard, "blobs", kTensorFormatVersion);
    manifest.document = shard;
    return manifest;
}

// The checksum covers the exact text with the checksum's value replaced by zeros: any altered byte,
// even in white space, changes it.
std::string renderManifest(const nlohmann::json& document)
{
    nlohmann::json withField = document;
    withField[kChecksumKey] = kPlaceholder;
    std::string text = withField.dump(2) + "\n";
    std::string placeholderField = checksumField(kPlaceholder);
    auto at = text.find(placeholderField);
    std::string sum = checksumHex(checksum(text.data(), text.size()));
    text.replace(at, placeholderField.size(), checksumField(sum));
    return text;
}

Manifest parseManifest(std::string_view text)
{
    nlohmann::json document = nlohmann::json::parse(text, nullptr, false);
    if (document.is_discarded() || !document.is_object())
        throw Error("manifest is not a JSON object");

    // Check the format version before anything else: a newer writer may have changed everything else.
    auto version = document.find("format_version");
    if (version == document.end() || !version->is_number_integer())
        throw Error("manifest: 'format_version' is missing or not an integer");
    if (version->get<long long>() > kMaxFormatVersion)
        throw FormatError("checkpoint manifest has format_version "
            + std::to_string(version->get<long long>()) + ", this library reads up to "
            + std::to_string(kMaxFormatVersion) + ": restore it with a newer baton");
    if (version->get<long long>() < 1)
        throw Error("manifest: format_version " + std::to_string(version->get<long long>()) + " is invalid");

    auto stored = document.find(kChecksumKey);
    if (stored == document.end() || !stored->is_string())
        throw Error(std::string("manifest: '") + kChecksumKey + "' is missing");
    std::string storedHex = stored->get<std::string>();
    std::uint64_t expected = parseHex(storedHex);
    std::string canonical(text);
    auto at = canonical.find(checksumField(storedHex));
    if (at == std::string::npos)
        throw Error("manifest: its checksum field is not where the writer puts it");
    canonical.replace(at, checksumField(storedHex).size(), checksumField(kPlaceholder));
    if (checksum(canonical.data(), canonical.size()) != expected)
        throw Error("manifest checksum mismatch: the file was altered or torn");

    Manifest manifest;
    manifest.formatVersion = version->get<int>();
    manifest.iteration = field<std::uint64_t>(document, "iteration", "manifest");
    manifest.epoch = field<std::uint64_t>(document, "epoch", "manifest");
    manifest.createdUnix = field<double>(document, "created_unix", "manifest");
    manifest.totalBytes = field<std::uint64_t>(document, "total_bytes", "manifest");
    const bool sharded = manifest.formatVersion >= kShardedFormatVersion;
    manifest.regions = parseEntries(document, "regions", manifest.formatVersion);
    manifest.blobs = parseEntries(document, "blobs", manifest.formatVersion);
    // Informational fields: never a reason to reject an otherwise intact checkpoint.
    readHandoverFields(document, manifest);
    document.erase(kChecksumKey);
    manifest.document = std::move(document);
    if (sharded)
        checkShardedLayout(manifest);
    else
        manifest.files = { ManifestFile { kDataFileName, 0, manifest.totalBytes } };
    return manifest;
}

} // namespace baton::ckpt
