// Tensor pieces (format version 3, layout "box"): the geometry that maps a saved piece onto a registered
// one, checked element by element against a brute-force mapping, and multi-rank checkpoints of a tensor
// sharded along another dimension, replicated across a mesh dimension or split as flat runs, restored on
// other world sizes and layouts (ranks as threads of this process, as in multirank_test).
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/manifest.hpp"
#include "baton/ckpt/reader.hpp"
#include "checkpointer/src/tensor_box.hpp"
#include "rank_threads.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::runRanks;
using baton::test::TempDir;

namespace {

// --- geometry ---------------------------------------------------------------------------------------

// The global row-major element index of every element a piece holds, in the piece's order.
std::vector<std::uint64_t> elementsOf(const std::vector<std::uint64_t>& shape, const TensorBox& box,
    std::uint64_t first, std::uint64_t count)
{
    std::vector<std::uint64_t> all;
    const std::size_t n = shape.size();
    std::vector<std::uint64_t> index(box.offset);
    const std::uint64_t total = volume(box.length);
    for (std::uint64_t k = 0; k < total; ++k) {
        std::uint64_t flat = 0;
        for (std::size_t i = 0; i < n; ++i)
            flat = flat * shape[i] + index[i];
        all.push_back(flat);
        for (std::size_t i = n; i-- > 0;) {
            if (++index[i] < box.offset[i] + box.length[i])
                break;
            index[i] = box.offset[i];
        }
    }
    return { all.begin() + static_cast<std::ptrdiff_t>(first),
        all.begin() + static_cast<std::ptrdiff_t>(first + count) };
}

struct RandomPiece {
    TensorBox box;
    std::uint64_t first = 0, count = 0;
};

RandomPiece randomPiece(std::mt19937_64& random, const std::vector<std::uint64_t>& shape)
{
    RandomPiece piece;
    for (auto length : shape) {
        const std::uint64_t begin = random() % length;
        piece.box.offset.push_back(begin);
        piece.box.length.push_back(1 + random() % (length - begin));
    }
    const std::uint64_t elements = volume(piece.box.length);
    piece.first = random() % elements;
    piece.count = 1 + random() % (elements - piece.first);
    if (random() % 3 == 0) { // often the whole box, as a DTensor's shard is
        piece.first = 0;
        piece.count = elements;
    }
    return piece;
}

TEST(TensorGeometry, ContiguousBoxesOfARunOfElements)
{
    // Elements 5..18 of a 4 x 6 tensor: the end of row 0, rows 1 and 2 whole, the start of row 3.
    const auto piece = tensorPiece({ 4, 6 }, 1, { { 0, 0 }, { 4, 6 } }, 5, 14);
    const auto boxes = contiguousBoxes(piece);
    ASSERT_EQ(boxes.size(), 3u);
    EXPECT_EQ(boxes[0].box.offset, (std::vector<std::uint64_t> { 0, 5 }));
    EXPECT_EQ(boxes[0].box.length, (std::vector<std::uint64_t> { 1, 1 }));
    EXPECT_EQ(boxes[1].box.offset, (std::vector<std::uint64_t> { 1, 0 }));
    EXPECT_EQ(boxes[1].box.length, (std::vector<std::uint64_t> { 2, 6 }));
    EXPECT_EQ(boxes[2].box.offset, (std::vector<std::uint64_t> { 3, 0 }));
    EXPECT_EQ(boxes[2].box.length, (std::vector<std::uint64_t> { 1, 1 }));
    EXPECT_EQ(boxes[2].start, 13u);
}

TEST(TensorGeometry, CopiesMatchAnElementByElementMappingForRandomPieces)
{
    std::mt19937_64 random(20261203);
    for (int trial = 0; trial < 3000; ++trial) {
        const std::size_t dims = 1 + random() % 4;
        std::vector<std::uint64_t> shape;
        for (std::size_t i = 0; i < dims; ++i)
            shape.push_back(1 + random() % 7);
        const std::uint64_t elementSize = std::array<std::uint64_t, 4> { 1, 2, 4, 8 }[random() % 4];
        const RandomPiece saved = randomPiece(random, shape), wanted = randomPiece(random, shape);
        const auto source = contiguousBoxes(tensorPiece(shape, elementSize, saved.box, saved.first, saved.count));
        const auto target = contiguousBoxes(tensorPiece(shape, elementSize, wanted.box, wanted.first, wanted.count));
        // Source bytes hold (element index, byte) codes; the copies must put the right code at every
        // byte of the target that the source holds, and touch nothing else.
        const auto savedElements = elementsOf(shape, saved.box, saved.first, saved.count);
        const auto wantedElements = elementsOf(shape, wanted.box, wanted.first, wanted.count);
        std::vector<std::uint32_t> from(savedElements.size() * elementSize), to(wantedElements.size() * elementSize, 0);
        for (std::size_t e = 0; e < savedElements.size(); ++e) {
            for (std::uint64_t b = 0; b < elementSize; ++b)
                from[e * elementSize + b] = static_cast<std::uint32_t>(savedElements[e] * 8 + b + 1);
        }
        for (const auto& copy : overlapCopies(source, target)) {
            ASSERT_LE(copy.from + copy.size, from.size());
            ASSERT_LE(copy.to + copy.size, to.size());
            for (std::uint64_t i = 0; i < copy.size; ++i)
                to[copy.to + i] = from[copy.from + i];
        }
        const std::set<std::uint64_t> held(savedElements.begin(), savedElements.end());
        for (std::size_t e = 0; e < wantedElements.size(); ++e) {
            for (std::uint64_t b = 0; b < elementSize; ++b) {
                const std::uint32_t expected
                    = held.contains(wantedElements[e]) ? static_cast<std::uint32_t>(wantedElements[e] * 8 + b + 1) : 0;
                ASSERT_EQ(to[e * elementSize + b], expected) << "trial " << trial << ", element " << e;
            }
        }
        EXPECT_EQ(overlaps(source, target),
            std::any_of(wantedElements.begin(), wantedElements.end(), [&](auto x) { return held.contains(x); }));
    }
}

TEST(TensorGeometry, RefusesPiecesOutsideTheirTensor)
{
    EXPECT_THROW(tensorPiece({ 4, 6 }, 4, { { 2, 0 }, { 3, 6 } }, 0, 18), Error);
    EXPECT_THROW(tensorPiece({ 4, 6 }, 4, { { 0, 0 }, { 2, 6 } }, 5, 8), Error);
    EXPECT_THROW(tensorPiece({ 4 }, 4, { { 0, 0 }, { 2, 2 } }, 0, 4), Error);
    EXPECT_THROW(tensorPiece({ 1ull << 40, 1ull << 40 }, 4, { { 0, 0 }, { 1, 1 } }, 0, 1), Error);
    EXPECT_NO_THROW(tensorPiece({}, 4, { {}, {} }, 0, 1)); // a tensor of no dimensions is one element
}

// --- multi-rank checkpoints of tensor pieces ----------------------------------------------------------

constexpr std::uint64_t kRows = 37, kCols = 53; // uneven on every split below
constexpr std::uint64_t kElement = sizeof(float);

float valueAt(std::uint64_t row, std::uint64_t col, std::uint64_t iteration)
{
    return static_cast<float>(row * 1000 + col) + 0.25f * static_cast<float>(iteration);
}

std::pair<std::uint64_t, std::uint64_t> split(std::uint64_t total, int part, int parts)
{
    const std::uint64_t begin = total * static_cast<std::uint64_t>(part) / static_cast<std::uint64_t>(parts);
    return { begin, total * static_cast<std::uint64_t>(part + 1) / static_cast<std::uint64_t>(parts) - begin };
}

// How a rank of a world holds the weight: the ways training frameworks shard it.
enum class Split {
    Rows, // DTensor Shard(0) on a 1-D mesh
    Columns, // Shard(1)
    MeshReplicatedColumns, // a 2-D mesh (2 x size/2): Replicate() over the first dimension, Shard(1) over the second
    PaddedColumns, // Shard(1) as DTensor keeps an uneven one: a view into a buffer padded to even columns
    FlatRuns, // FSDP's flat shards: a run of the row-major elements
    Whole, // replicated (DDP), registered with the earlier layout
};

struct WeightShard {
    std::vector<float> data;
    TensorBox box;
    std::uint64_t first = 0;
    std::uint32_t writers = 1, writer = 0;
    std::vector<std::uint64_t> strides; // PaddedColumns
};

WeightShard shardOf(Split split_, int rank, int size)
{
    WeightShard shard;
    shard.box = { { 0, 0 }, { kRows, kCols } };
    switch (split_) {
    case Split::Rows: {
        auto [at, length] = split(kRows, rank, size);
        shard.box = { { at, 0 }, { length, kCols } };
        break;
    }
    case Split::Columns: {
        auto [at, length] = split(kCols, rank, size);
        shard.box = { { 0, at }, { kRows, length } };
        break;
    }
    case Split::MeshReplicatedColumns: {
        const int replicas = 2, shards = size / 2;
        auto [at, length] = split(kCols, rank % shards, shards);
        shard.box = { { 0, at }, { kRows, length } };
        shard.writers = replicas;
        shard.writer = static_cast<std::uint32_t>(rank / shards);
        break;
    }
    case Split::PaddedColumns: {
        const std::uint64_t width = (kCols + static_cast<std::uint64_t>(size) - 1) / static_cast<std::uint64_t>(size);
        const std::uint64_t at = std::min(kCols, width * static_cast<std::uint64_t>(rank));
        shard.box = { { 0, at }, { kRows, std::min(width, kCols - at) } };
        shard.strides = { width, 1 };
        shard.data.resize(stridedSpan(shard.box.length, shard.strides));
        return shard;
    }
    case Split::FlatRuns: {
        auto [at, length] = split(kRows * kCols, rank, size);
        shard.first = at;
        shard.data.resize(length);
        return shard;
    }
    case Split::Whole:
        break;
    }
    shard.data.resize(volume(shard.box.length));
    return shard;
}

// The weight's elements as the shard holds them, for `iteration` (a padded shard's padding stays 0).
std::vector<float> expected(const WeightShard& shard, std::uint64_t iteration)
{
    if (!shard.strides.empty()) {
        std::vector<float> memory(shard.data.size(), 0.0f);
        for (std::uint64_t r = 0; r < shard.box.length[0]; ++r) {
            for (std::uint64_t c = 0; c < shard.box.length[1]; ++c)
                memory[r * shard.strides[0] + c] = valueAt(r, shard.box.offset[1] + c, iteration);
        }
        return memory;
    }
    std::vector<float> values;
    for (auto flat : elementsOf({ kRows, kCols }, shard.box, shard.first, shard.data.size()))
        values.push_back(valueAt(flat / kCols, flat % kCols, iteration));
    return values;
}

int launches = 0;

Options rankOptions(const std::filesystem::path& dir, int rank, int size, int session)
{
    Options options;
    options.chainDir = dir;
    options.log = [](std::string_view) {};
    if (size > 1)
        options.coordinator = std::make_shared<FileCoordinator>(
            dir, "pieces-" + std::to_string(session), rank, size, std::chrono::seconds(20));
    return options;
}


TensorPiece piece(std::vector<std::uint64_t> shape, std::uint64_t elementSize, TensorBox box, std::uint64_t first,
    std::uint32_t writers = 1, std::uint32_t writer = 0)
{
    TensorPiece result;
    result.shape = std::move(shape);
    result.elementSize = elementSize;
    result.boxOffset = std::move(box.offset);
    result.boxLength = std::move(box.length);
    result.first = first;
    result.writers = writers;
    result.writer = writer;
    return result;
}

TensorPiece pieceOf(const WeightShard& shard)
{
    TensorPiece result = piece({ kRows, kCols }, kElement, shard.box, shard.first, shard.writers, shard.writer);
    result.strides = shard.strides;
    return result;
}

void registerWeight(Checkpointer& ckpt, WeightShard& shard, Split split_, int size)
{
    ckpt.registerRegion("weight", shard.data.data(), shard.data.size() * kElement);
    if (size == 1)
        return;
    if (split_ == Split::Whole)
        ckpt.setRegionLayout("weight", RegionLayout::replicated());
    else
        ckpt.setRegionLayout("weight", RegionLayout::box(pieceOf(shard)));
}

void save(const std::filesystem::path& dir, Split split_, int size, std::uint64_t iteration)
{
    const int session = ++launches;
    runRanks(size, [&](int rank) {
        Options options = rankOptions(dir, rank, size, session);
        options.keep = 3;
        Checkpointer ckpt(std::move(options));
        WeightShard shard = shardOf(split_, rank, size);
        registerWeight(ckpt, shard, split_, size);
        const auto values = expected(shard, iteration);
        std::copy(values.begin(), values.end(), shard.data.begin()); // in place: the region stays where it is
        if (!ckpt.checkpointNow(iteration))
            throw Error("rank " + std::to_string(rank) + ": " + ckpt.lastError());
    });
}

// Restores on `size` ranks holding the weight as `split_`; returns the restored iteration.
std::uint64_t restore(const std::filesystem::path& dir, Split split_, int size)
{
    std::vector<std::uint64_t> iterations(static_cast<std::size_t>(size));
    const int session = ++launches;
    runRanks(size, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir, rank, size, session));
        WeightShard shard = shardOf(split_, rank, size);
        registerWeight(ckpt, shard, split_, size);
        const auto result = ckpt.restore();
        if (!result.restored)
            throw Error("rank " + std::to_string(rank) + " restored nothing");
        if (shard.data != expected(shard, result.iteration))
            throw Error("rank " + std::to_string(rank) + ": the weight is not that of iteration "
                + std::to_string(result.iteration));
        iterations[static_cast<std::size_t>(rank)] = result.iteration;
    });
    for (auto iteration : iterations)
        EXPECT_EQ(iteration, iterations.front());
    return iterations.front();
}

Manifest manifestOf(const std::filesystem::path& checkpoint)
{
    std::ifstream in(checkpoint / kManifestName);
    return parseManifest(std::string(std::istreambuf_iterator<char>(in), {}));
}

TEST(TensorPieces, ColumnShardsRestoreAsRowsFlatRunsAWholeTensorAndOnAMesh)
{
    TempDir dir;
    save(dir.path(), Split::Columns, 4, 10);
    const Manifest manifest = manifestOf(dir.path() / checkpointDirName(10));
    EXPECT_EQ(manifest.formatVersion, kTensorFormatVersion);
    std::uint64_t bytes = 0;
    for (const auto& entry : manifest.regions) {
        EXPECT_EQ(entry.layout, kLayoutBox);
        EXPECT_EQ(entry.shape, (std::vector<std::uint64_t> { kRows, kCols }));
        bytes += entry.size;
    }
    EXPECT_EQ(bytes, kRows * kCols * kElement);
    EXPECT_EQ(restore(dir.path(), Split::Rows, 3), 10u);
    EXPECT_EQ(restore(dir.path(), Split::FlatRuns, 2), 10u);
    EXPECT_EQ(restore(dir.path(), Split::MeshReplicatedColumns, 4), 10u);
    EXPECT_EQ(restore(dir.path(), Split::Whole, 2), 10u);
    EXPECT_EQ(restore(dir.path(), Split::Whole, 1), 10u); // one process: the whole tensor
    EXPECT_EQ(restore(dir.path(), Split::PaddedColumns, 4), 10u);
    // Read outside a training: the tensor whole, from the four ranks' pieces.
    const CheckpointReader reader(dir.path() / checkpointDirName(10));
    ASSERT_EQ(reader.regions().size(), 1u);
    EXPECT_EQ(reader.regions()[0].shape, (std::vector<std::uint64_t> { kRows, kCols }));
    std::vector<float> whole(kRows * kCols);
    reader.readRegion("weight", std::as_writable_bytes(std::span(whole)));
    WeightShard all = shardOf(Split::Whole, 0, 1);
    EXPECT_EQ(whole, expected(all, 10));
}

TEST(TensorPieces, PaddedShardsAreWrittenWithoutTheirPaddingAndRestoreAnywhere)
{
    TempDir dir;
    save(dir.path(), Split::PaddedColumns, 4, 50); // 53 columns as 14, 14, 14, 11
    std::uint64_t bytes = 0;
    for (const auto& entry : manifestOf(dir.path() / checkpointDirName(50)).regions)
        bytes += entry.size;
    EXPECT_LT(bytes, kRows * kCols * kElement + 4 * kRows * 3 * kElement); // its own rows, not the padding after the last
    EXPECT_EQ(restore(dir.path(), Split::Rows, 3), 50u);
    EXPECT_EQ(restore(dir.path(), Split::PaddedColumns, 3), 50u);
    EXPECT_EQ(restore(dir.path(), Split::FlatRuns, 2), 50u);
}

TEST(TensorPieces, ReplicasOfAPieceWriteItOnceBetweenThem)
{
    TempDir dir;
    save(dir.path(), Split::MeshReplicatedColumns, 4, 20);
    const Manifest manifest = manifestOf(dir.path() / checkpointDirName(20));
    std::uint64_t bytes = 0;
    std::set<int> writers;
    for (const auto& entry : manifest.regions) {
        bytes += entry.size;
        if (entry.size > 0)
            writers.insert(entry.rank);
    }
    EXPECT_EQ(bytes, kRows * kCols * kElement); // not twice
    EXPECT_EQ(writers.size(), 4u); // every replica writes its half
    EXPECT_EQ(restore(dir.path(), Split::Columns, 3), 20u);
    EXPECT_EQ(restore(dir.path(), Split::FlatRuns, 4), 20u);
}

TEST(TensorPieces, FlatRunsAndADataParallelCheckpointRestoreIntoTensorPieces)
{
    TempDir dir;
    save(dir.path(), Split::FlatRuns, 3, 30);
    EXPECT_EQ(restore(dir.path(), Split::Columns, 2), 30u);
    TempDir older;
    save(older.path(), Split::Whole, 2, 40); // version 2: replicated, no shape
    EXPECT_EQ(manifestOf(older.path() / checkpointDirName(40)).formatVersion, kShardedFormatVersion);
    EXPECT_EQ(restore(older.path(), Split::Rows, 4), 40u);
}

TEST(TensorPieces, AnotherShapeFailsOnEveryRankNamingTheTensor)
{
    TempDir dir;
    save(dir.path(), Split::Rows, 2, 10);
    const int session = ++launches;
    std::vector<std::string> errors(2);
    runRanks(2, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir.path(), rank, 2, session));
        std::vector<float> data(kRows * kCols / 2 + 1);
        ckpt.registerRegion("weight", data.data(), data.size() * kElement);
        // The same bytes as another shape: a transposed weight.
        ckpt.setRegionLayout("weight",
            RegionLayout::box(piece({ kCols, kRows }, kElement, { { 0, 0 }, { kCols, kRows } }, rank == 0 ? 0 : data.size() - 1)));
        try {
            ckpt.restore();
        } catch (const Error& e) {
            errors[static_cast<std::size_t>(rank)] = e.what();
        }
    });
    for (const auto& error : errors) {
        EXPECT_NE(error.find("tensor 'weight' has shape [37, 53]"), std::string::npos) << error;
        EXPECT_NE(error.find("this one shape [53, 37]"), std::string::npos) << error;
    }
}

TEST(TensorPieces, ATornPieceOnOneRankMakesAllRanksFallBackTogether)
{
    TempDir dir;
    save(dir.path(), Split::Columns, 2, 10);
    save(dir.path(), Split::Columns, 2, 20);
    // One byte of rank 1's piece in the newest checkpoint flipped.
    const auto file = dir.path() / checkpointDirName(20) / shardFileName(1);
    std::fstream data(file, std::ios::in | std::ios::out | std::ios::binary);
    data.seekg(8);
    char byte = 0;
    data.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x40);
    data.seekp(8);
    data.write(&byte, 1);
    data.close();
    EXPECT_EQ(restore(dir.path(), Split::Rows, 2), 10u); // both ranks: iteration 10
    EXPECT_EQ(restore(dir.path(), Split::Whole, 1), 10u);
}

// A rank that needs part of a piece reads and verifies only the chunks that hold it: a damaged chunk is
// found by the rank that reads it, not by one that needs only the chunks before it.
TEST(TensorPieces, ARankReadsOnlyTheChunksOfAPieceItNeeds)
{
    constexpr std::uint64_t rows = 3000, cols = 1024; // 12 MB: each rank's half is two chunks of 4 MiB
    TempDir dir;
    auto rowsOf = [&](int rank, int size) { return split(rows, rank, size); };
    auto run = [&](int size, std::uint64_t iteration, bool save) {
        const int session = ++launches;
        std::vector<Fallback> fallbacks;
        std::mutex mutex;
        runRanks(size, [&](int rank) {
            Checkpointer ckpt(rankOptions(dir.path(), rank, size, session));
            auto [row, count] = rowsOf(rank, size);
            std::vector<float> data(count * cols);
            ckpt.registerRegion("w", data.data(), data.size() * kElement);
            ckpt.setRegionLayout("w", RegionLayout::box(piece({ rows, cols }, kElement, { { row, 0 }, { count, cols } }, 0)));
            if (save) {
                std::fill(data.begin(), data.end(), static_cast<float>(iteration));
                if (!ckpt.checkpointNow(iteration))
                    throw Error(ckpt.lastError());
                return;
            }
            const auto result = ckpt.restore();
            std::lock_guard lock(mutex);
            if (rank == 0)
                fallbacks = result.fallbacks;
        });
        return fallbacks;
    };
    run(2, 10, true);
    run(2, 20, true);
    const Manifest manifest = manifestOf(dir.path() / checkpointDirName(20));
    const ManifestEntry* second = nullptr;
    for (const auto& entry : manifest.regions)
        second = entry.rank == 1 ? &entry : second;
    ASSERT_NE(second, nullptr);
    ASSERT_EQ(second->chunkChecksums.size(), 2u);
    // One byte of the second chunk of rank 1's piece (rows 2524 to 2999) flipped.
    std::fstream data(dir.path() / checkpointDirName(20) / shardFileName(1), std::ios::in | std::ios::out | std::ios::binary);
    data.seekp(static_cast<std::streamoff>(second->offset + second->chunkBytes + 100));
    data.put('\x7f');
    data.close();
    // On 3 ranks, rank 1 (rows 1000 to 1999) needs only the first chunk of that piece, rank 2 both.
    const auto fallbacks = run(3, 0, false);
    ASSERT_EQ(fallbacks.size(), 1u);
    EXPECT_NE(fallbacks[0].reason.find("rank 2: checksum mismatch in chunk 1 of 'w'"), std::string::npos)
        << fallbacks[0].reason;
}

TEST(TensorPieces, APieceThatLeavesItsTensorIsRefusedWhenItIsSet)
{
    TempDir dir;
    const int session = ++launches;
    runRanks(2, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir.path(), rank, 2, session));
        std::vector<float> data(10);
        ckpt.registerRegion("weight", data.data(), data.size() * kElement);
        EXPECT_THROW(ckpt.setRegionLayout("weight", RegionLayout::box(piece({ 4, 2 }, kElement, { { 0, 0 }, { 4, 2 } }, 0))),
            Error); // 10 elements in a box of 8
        EXPECT_THROW(ckpt.setRegionLayout("weight", RegionLayout::box(piece({ 5, 2 }, 3, { { 0, 0 }, { 5, 2 } }, 0))),
            Error); // 40 bytes are not elements of 3
        EXPECT_THROW(
            ckpt.setRegionLayout("weight", RegionLayout::box(piece({ 5, 2 }, kElement, { { 0, 0 }, { 5, 2 } }, 0, 2, 2))),
            Error); // writer 2 of 2
        TensorPiece strided = piece({ 5, 4 }, kElement, { { 0, 0 }, { 5, 2 } }, 0);
        strided.strides = { 3, 1 };
        EXPECT_THROW(ckpt.setRegionLayout("weight", RegionLayout::box(strided)), Error); // spans 14, not 10
    });
}

} // namespace
