// The snapshot phase: the staging pool, and the copy of the registered state into it that overlaps the
// next forward/backward pass.
#include "checkpointer_impl.hpp"
#include "tensor_box.hpp"

#include <algorithm>
#include <cstring>

#include "io.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace {

constexpr std::size_t kPoolGranule = 2 << 20; // staging grows in these steps

// Rank `rank`'s part of a replicated region of `size` bytes: equal parts, on page boundaries so that
// each rank's copy and write stream whole pages.
std::pair<std::uint64_t, std::uint64_t> replicatedPart(std::uint64_t size, int rank, int ranks)
{
    auto boundary = [&](int r) -> std::uint64_t {
        if (r >= ranks)
            return size;
        auto at = static_cast<std::uint64_t>(
            static_cast<unsigned __int128>(size) * static_cast<unsigned>(r) / static_cast<unsigned>(ranks));
        return std::min<std::uint64_t>(io::roundUp(at, io::kDirectAlignment), size);
    };
    return { boundary(rank), boundary(rank + 1) };
}

} // namespace

const char* layoutName(RegionLayout::Kind kind)
{
    switch (kind) {
    case RegionLayout::Kind::Replicated:
        return kLayoutReplicated;
    case RegionLayout::Kind::Sharded:
        return kLayoutSharded;
    case RegionLayout::Kind::Box:
        return kLayoutBox;
    case RegionLayout::Kind::PerRank:
        break;
    }
    return kLayoutRank;
}

std::vector<std::vector<Piece>> makeCopyTasks(const std::vector<Piece>& copies, unsigned threads)
{
    std::size_t total = 0;
    for (const auto& c : copies)
        total += c.size;
    std::size_t share = std::max<std::size_t>(total / threads + 1, 1 << 20);
    std::vector<std::vector<Piece>> tasks;
    std::vector<Piece> current;
    std::size_t currentBytes = 0;
    for (const auto& c : copies) {
        for (std::size_t at = 0; at < c.size || (c.size == 0 && at == 0); at += share) {
            std::size_t n = std::min(share, c.size - at);
            current.push_back({ c.to + at, c.from + at, n });
            currentBytes += n;
            if (currentBytes >= share) {
                tasks.push_back(std::move(current));
                current.clear();
                currentBytes = 0;
            }
            if (c.size == 0)
                break;
        }
    }
    if (!current.empty())
        tasks.push_back(std::move(current));
    return tasks;
}

void copyPieces(const std::vector<Piece>& pieces)
{
    for (const auto& p : pieces) {
        if (p.size > 0)
            std::memcpy(p.to, p.from, p.size);
    }
}

StagingReserve::~StagingReserve()
{
    auto [pool, capacity] = take();
    if (pool != nullptr)
        backend_->freeStaging(pool, capacity);
}

void StagingReserve::start(DeviceBackend& backend, std::size_t bytes)
{
    std::lock_guard lock(mutex_);
    if (allocating_ || capacity_ >= bytes)
        return;
    if (pool_ != nullptr)
        backend.freeStaging(pool_, capacity_);
    pool_ = nullptr;
    capacity_ = 0;
    backend_ = &backend;
    allocating_ = true;
    allocation_.post([this, bytes] {
        std::byte* pool = nullptr;
        try {
            pool = backend_->allocateStaging(bytes);
        } catch (const std::exception&) {
            // The checkpoint allocates again itself and reports the error then.
        }
        std::lock_guard done(mutex_);
        pool_ = pool;
        capacity_ = pool != nullptr ? bytes : 0;
        allocating_ = false;
    });
}

std::pair<std::byte*, std::size_t> StagingReserve::take()
{
    allocation_.wait();
    std::lock_guard lock(mutex_);
    return { std::exchange(pool_, nullptr), std::exchange(capacity_, 0) };
}

// Caller holds the mutex and no checkpoint is in flight. Takes over the pool that prepareStaging()
// allocated when it is large enough (waiting for it if need be), else allocates one here.
void Checkpointer::Impl::ensureStaging(std::size_t bytes)
{
    bytes = io::roundUp(std::max<std::size_t>(bytes, 1), kPoolGranule);
    if (bytes <= stagingCapacity)
        return;
    auto [prepared, preparedCapacity] = reserve.take();
    if (prepared != nullptr && preparedCapacity < bytes) {
        backend->freeStaging(prepared, preparedCapacity);
        prepared = nullptr;
    }
    if (staging != nullptr)
        backend->freeStaging(staging, stagingCapacity);
    staging = nullptr;
    stagingCapacity = 0;
    if (prepared == nullptr) {
        prepared = backend->allocateStaging(bytes);
        preparedCapacity = bytes;
        ++counters.stagingAllocations;
    }
    staging = prepared;
    stagingCapacity = preparedCapacity;
}

void Checkpointer::Impl::prepareStagingLocked()
{
    stagingPrepared = true;
    const std::size_t bytes = stagingBytesNeeded();
    if (bytes > stagingCapacity)
        reserve.start(*backend, bytes);
}

// What the next checkpoint's staging pool must hold: its entries as placeEntries() places them.
std::size_t Checkpointer::Impl::stagingBytesNeeded() const
{
    std::uint64_t offset = 0;
    auto place = [&](std::uint64_t size) { offset = io::roundUp(offset, kEntryAlignment) + size; };
    for (const auto& [name, spec] : regions)
        place(partOf(spec).length);
    for (const auto& [name, bytes] : blobs)
        place(bytes.size());
    return io::roundUp(std::max<std::size_t>(io::roundUp(offset, io::kDirectAlignment), 1), kPoolGranule);
}

namespace {

// The rows of a strided piece's first dimension that writer `piece.writer` writes: (first, count).
std::pair<std::uint64_t, std::uint64_t> writerRows(const TensorPiece& piece)
{
    const std::uint64_t rows = piece.boxLength.empty() ? 0 : piece.boxLength[0];
    const std::uint64_t begin = rows * piece.writer / piece.writers, end = rows * (piece.writer + 1) / piece.writers;
    return { begin, end - begin };
}

} // namespace

Checkpointer::Impl::Part Checkpointer::Impl::partOf(const RegionSpec& spec) const
{
    if (distributed && spec.layout.kind == RegionLayout::Kind::Replicated) {
        auto [begin, end] = replicatedPart(spec.size, rank(), worldSize());
        return { begin, end - begin, begin, spec.size };
    }
    if (distributed && spec.layout.kind == RegionLayout::Kind::Sharded)
        return { 0, spec.size, spec.layout.offset, spec.layout.globalSize };
    if (distributed && spec.layout.kind == RegionLayout::Kind::Box) {
        // The holders of one piece write equal runs of its elements.
        const TensorPiece& piece = spec.layout.piece;
        const std::uint64_t globalSize = volume(piece.shape) * piece.elementSize;
        if (!piece.written)
            return { 0, 0, 0, globalSize };
        if (!piece.strides.empty()) {
            // Rows of the first dimension, each writer's spanning its first to its last element.
            auto [row, rows] = writerRows(piece);
            if (rows == 0)
                return { 0, 0, 0, globalSize };
            std::vector<std::uint64_t> lengths = piece.boxLength;
            lengths[0] = rows;
            return { row * piece.strides[0] * piece.elementSize,
                stridedSpan(lengths, piece.strides) * piece.elementSize, 0, globalSize };
        }
        const std::uint64_t elements = spec.size / piece.elementSize;
        auto boundary = [&](std::uint64_t writer) {
            return static_cast<std::uint64_t>(static_cast<unsigned __int128>(elements) * writer / piece.writers)
                * piece.elementSize;
        };
        const std::uint64_t begin = boundary(piece.writer), end = boundary(piece.writer + 1);
        return { begin, end - begin, 0, globalSize };
    }
    return { 0, spec.size, 0, spec.size };
}

// The manifest entries of the registered regions and blobs, at their places in the staging pool and
// the data file. With several ranks each writes its own file; a replicated region is written in parts,
// one per rank, and a sharded one as this rank's shard. Returns where each region's entry starts in its
// memory.
std::vector<std::uint64_t> Checkpointer::Impl::placeEntries(InFlightCheckpoint& checkpoint) const
{
    const int ownRank = rank();
    const std::string file = distributed ? shardFileName(ownRank) : std::string(kDataFileName);
    std::uint64_t offset = 0;
    auto place = [&](const std::string& name, std::size_t size, int device) {
        offset = io::roundUp(offset, kEntryAlignment);
        ManifestEntry entry;
        entry.name = name;
        entry.file = file;
        entry.offset = offset;
        entry.size = size;
        entry.device = device;
        entry.rank = ownRank;
        entry.globalSize = size;
        offset += size;
        return entry;
    };
    std::vector<std::uint64_t> sourceOffsets;
    for (const auto& [name, spec] : regions) {
        const Part part = partOf(spec);
        ManifestEntry entry = place(name, part.length, spec.device);
        if (distributed)
            entry.layout = layoutName(spec.layout.kind);
        entry.at = part.at;
        entry.globalSize = part.globalSize;
        if (distributed && spec.layout.kind == RegionLayout::Kind::Box) {
            const TensorPiece& piece = spec.layout.piece;
            entry.shape = piece.shape;
            entry.elementSize = piece.elementSize;
            entry.boxOffset = piece.boxOffset;
            entry.boxLength = piece.boxLength;
            entry.chunkBytes = chunkBytesFor(entry.size); // a reader of part of it verifies what it read
            if (piece.strides.empty()) {
                entry.first = piece.first + part.from / piece.elementSize;
            } else {
                auto [row, rows] = writerRows(piece);
                entry.boxOffset[0] += row;
                entry.boxLength[0] = part.length == 0 ? 0 : rows;
                entry.strides = piece.strides;
            }
        }
        checkpoint.regions.push_back(std::move(entry));
        sourceOffsets.push_back(part.from);
    }
    for (const auto& [name, bytes] : blobs)
        checkpoint.blobs.push_back(place(name, bytes.size(), -1));
    checkpoint.totalBytes = offset;
    return sourceOffsets;
}

// Copies the blobs into the staging pool now and lists the copies of the regions; padding is zeroed,
// since the reader checks it, so that no byte of a data file goes unchecked.
void Checkpointer::Impl::stageCopies(const InFlightCheckpoint& checkpoint,
    const std::vector<std::uint64_t>& sourceOffsets, std::vector<Piece>& hostCopies,
    std::vector<DeviceCopy>& deviceCopies)
{
    std::uint64_t end = 0;
    auto zeroGapBefore = [&](const ManifestEntry& e) {
        std::memset(staging + end, 0, e.offset - end);
        end = e.offset + e.size;
    };
    for (std::size_t i = 0; i < checkpoint.regions.size(); ++i) {
        const auto& entry = checkpoint.regions[i];
        zeroGapBefore(entry);
        const auto& spec = regions.at(entry.name);
        if (spec.device < 0)
            hostCopies.push_back({ staging + entry.offset,
                static_cast<const std::byte*>(spec.data) + sourceOffsets[i], entry.size });
        else
            deviceCopies.push_back({ staging + entry.offset,
                static_cast<std::byte*>(spec.data) + sourceOffsets[i], entry.size, spec.device, spec.stream });
    }
    for (const auto& entry : checkpoint.blobs) {
        zeroGapBefore(entry);
        const auto& bytes = blobs.at(entry.name);
        if (!bytes.empty())
            std::memcpy(staging + entry.offset, bytes.data(), bytes.size());
    }
}

// Idle -> HostCopy (-> DeviceCopy) -> Persist: the copy tasks run on the pool, the persist thread takes
// the checkpoint over.
void Checkpointer::Impl::startLocked(std::uint64_t iteration, CheckpointFlags flags)
{
    InFlightCheckpoint checkpoint;
    checkpoint.iteration = iteration;
    checkpoint.flags = flags;
    checkpoint.epoch = epoch;
    checkpoint.fields = fields;
    checkpoint.requestedAt = Clock::now();
    checkpoint.sequence = checkpointSequence++;
    const std::string dirName = checkpointDirName(iteration);
    checkpoint.temporary = distributed && !drainer
        ? options.chainDir / ("." + dirName + ".s" + std::to_string(checkpoint.sequence) + ".tmp-" + leaderTag)
        : commitDir() / ("." + dirName + ".tmp-" + temporaryOwnerTag());
    const auto sourceOffsets = placeEntries(checkpoint);

    const auto stagingBegin = Clock::now();
    ensureStaging(io::roundUp(checkpoint.totalBytes, io::kDirectAlignment));
    const double stagingSeconds = seconds(Clock::now() - stagingBegin);
    std::vector<Piece> hostCopies;
    std::vector<DeviceCopy> deviceCopies;
    stageCopies(checkpoint, sourceOffsets, hostCopies, deviceCopies);

    backend->beginSnapshot(deviceCopies, deviceSnapshot);
    checkpoint.hasDeviceCopies = !deviceCopies.empty();
    const Phase afterHostCopies = checkpoint.hasDeviceCopies ? Phase::DeviceCopy : Phase::Persist;
    streamsToOrder = std::move(deviceCopies);

    auto tasks = makeCopyTasks(hostCopies, pool.size());
    hostCopiesLeft = tasks.size();
    snapshotDoneAt = checkpoint.requestedAt;
    snapshotStartedAt = checkpoint.requestedAt;
    ++counters.requested;
    stats = CheckpointStats {};
    stats.stagingSeconds = stagingSeconds;
    stats.iteration = iteration;
    stats.bytes = checkpoint.totalBytes;
    stats.final = flags.final;
    stats.trainingDone = flags.trainingDone;
    std::vector<std::function<void()>> copies;
    copies.reserve(tasks.size());
    for (auto& task : tasks) {
        copies.emplace_back([this, task = std::move(task), afterHostCopies] {
            copyPieces(task);
            std::lock_guard lock(mutex);
            if (--hostCopiesLeft == 0) {
                snapshotDoneAt = Clock::now();
                // Known as soon as beforeUpdate() returns, not only after the persist.
                stats.snapshotSeconds = seconds(snapshotDoneAt - snapshotStartedAt);
                enter(afterHostCopies);
            }
        });
    }
    queued = std::move(checkpoint);
    enter(copies.empty() ? afterHostCopies : Phase::HostCopy);
    pool.postAll(std::move(copies));
}

} // namespace baton::ckpt
