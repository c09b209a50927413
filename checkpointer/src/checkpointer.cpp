#include "baton/ckpt/checkpointer.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/manifest.hpp"
#include "baton_version.h"
#include "commit.hpp"
#include "device_backend.hpp"
#include "drain.hpp"
#include "io.hpp"
#include "thread_pool.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kPoolGranule = 2 << 20; // staging grows in these steps

const std::vector<std::string> kReservedFields = { "format_version", "iteration", "epoch", "created_unix",
    "total_bytes", "regions", "blobs", "timings", "files", "library_version", "manifest_checksum", "job_id",
    "restart_count", "final", "training_done", "world_size" };

double seconds(Clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

double unixNow()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct RegionSpec {
    void* data = nullptr;
    std::size_t size = 0;
    int device = -1;
    void* stream = nullptr;
    RegionLayout layout;
};

const char* layoutName(RegionLayout::Kind kind)
{
    switch (kind) {
    case RegionLayout::Kind::Replicated:
        return kLayoutReplicated;
    case RegionLayout::Kind::Sharded:
        return kLayoutSharded;
    case RegionLayout::Kind::PerRank:
        break;
    }
    return kLayoutRank;
}

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

struct Piece {
    std::byte* to;
    const std::byte* from;
    std::size_t size;
};

// Splits copies into one task per thread of about equal size (measured fastest: each thread streams one
// long range); small regions share a task.
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

struct Job {
    std::uint64_t iteration = 0;
    std::uint64_t sequence = 0; // checkpoints started by this Checkpointer before this one
    std::filesystem::path temporary; // where it is written before the commit
    std::uint64_t epoch = 0;
    std::vector<ManifestEntry> regions;
    std::vector<ManifestEntry> blobs;
    std::uint64_t totalBytes = 0;
    std::map<std::string, nlohmann::json> fields;
    Clock::time_point requestedAt;
    bool hasDeviceCopies = false;
    CheckpointFlags flags;
};

// Length in bytes of the UTF-8 sequence at text[at] (strict: no overlong forms, no surrogates, nothing
// above U+10FFFF), or 0 if it is not one.
std::size_t utf8SequenceLength(std::string_view text, std::size_t at)
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(at);
    if (lead < 0x80)
        return 1;
    std::size_t length;
    unsigned char low = 0x80, high = 0xbf; // the allowed range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        if (lead == 0xe0)
            low = 0xa0; // overlong
        else if (lead == 0xed)
            high = 0x9f; // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        if (lead == 0xf0)
            low = 0x90; // overlong
        else if (lead == 0xf4)
            high = 0x8f; // above U+10FFFF
    } else {
        return 0;
    }
    if (at + length > text.size() || byte(at + 1) < low || byte(at + 1) > high)
        return 0;
    for (std::size_t i = 2; i < length; ++i) {
        if (byte(at + i) < 0x80 || byte(at + i) > 0xbf)
            return 0;
    }
    return length;
}

constexpr std::size_t kMaxNameBytes = 1024;

// Names go into the manifest (JSON, which must be UTF-8) and may name files in tools: a name that would
// make every later checkpoint fail is refused when it is given.
void validateName(const char* kind, const std::string& name)
{
    auto refuse = [&](const std::string& why) {
        std::string shown;
        for (unsigned char c : name.substr(0, 64)) {
            if (c >= 0x20 && c < 0x7f) {
                shown += static_cast<char>(c);
            } else {
                char escaped[8];
                std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
                shown += escaped;
            }
        }
        throw Error(std::string(kind) + " name '" + shown + (name.size() > 64 ? "...'" : "'") + " " + why);
    };
    if (name.empty())
        refuse("is empty: a " + std::string(kind) + " needs a name");
    if (name.size() > kMaxNameBytes)
        refuse("is longer than " + std::to_string(kMaxNameBytes) + " bytes");
    // '/' separates the levels of a hierarchical name ("model/layer.0.weight", as baton.torch names its
    // tensors); a name read as a relative path must still stay below where it is put.
    if (name.front() == '/' || name.back() == '/')
        refuse("starts or ends with '/'");
    for (std::size_t begin = 0; begin <= name.size();) {
        std::size_t end = std::min(name.find('/', begin), name.size());
        std::string_view component(name.data() + begin, end - begin);
        if (component.empty() || component == "." || component == "..")
            refuse("has an empty, '.' or '..' path component");
        begin = end + 1;
    }
    for (std::size_t at = 0; at < name.size();) {
        const char c = name[at];
        if (c == '\0')
            refuse("contains a NUL byte");
        if (c == '\\')
            refuse("contains a path separator '\\'");
        const std::size_t length = utf8SequenceLength(name, at);
        if (length == 0)
            refuse("is not valid UTF-8 (byte " + std::to_string(at) + ")");
        at += length;
    }
}

nlohmann::json optionalNumber(const std::optional<std::uint64_t>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

} // namespace

// A staging pool allocated ahead (prepareStaging), on a thread of the copy pool, for the next checkpoint
// to take over: the training thread only posts the task. Start and take are called under the
// checkpointer's mutex, so they never overlap; take only with no checkpoint in flight, when no copy task
// waits for that mutex: a worker is then free to finish the allocation it waits for.
class StagingReserve {
public:
    explicit StagingReserve(ThreadPool& pool)
        : allocation_(pool)
    { }
    StagingReserve(const StagingReserve&) = delete;
    StagingReserve& operator=(const StagingReserve&) = delete;
    ~StagingReserve()
    {
        auto [pool, capacity] = take();
        if (pool != nullptr)
            backend_->freeStaging(pool, capacity);
    }

    // Starts allocating `bytes` unless a pool that large is ready or one is being allocated.
    void start(DeviceBackend& backend, std::size_t bytes)
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

    // Waits for an allocation under way and hands over its pool (null, 0 when there is none).
    std::pair<std::byte*, std::size_t> take()
    {
        allocation_.wait();
        std::lock_guard lock(mutex_);
        return { std::exchange(pool_, nullptr), std::exchange(capacity_, 0) };
    }

private:
    std::mutex mutex_;
    TaskGroup allocation_;
    DeviceBackend* backend_ = nullptr;
    std::byte* pool_ = nullptr;
    std::size_t capacity_ = 0;
    bool allocating_ = false;
};

struct Checkpointer::Impl {
    explicit Impl(Options opts)
        : options(std::move(opts))
        , coordinator(options.coordinator)
        , distributed(coordinator && coordinator->size() > 1)
        , backend(makeDeviceBackend())
        , pool(options.copyThreads != 0 ? options.copyThreads
                                        : std::clamp(std::thread::hardware_concurrency(), 1u, 4u))
    { }

    void log(const std::string& message) const
    {
        if (options.log)
            options.log(message);
        else
            std::cerr << "baton-ckpt: " << message << std::endl;
    }

    // Caller holds the mutex and no checkpoint is in flight. Takes over the pool that prepareStaging()
    // allocated when it is large enough (waiting for it if need be), else allocates one here.
    void ensureStaging(std::size_t bytes)
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

    void prepareStagingLocked()
    {
        stagingPrepared = true;
        const std::size_t bytes = stagingBytesNeeded();
        if (bytes > stagingCapacity)
            reserve.start(*backend, bytes);
    }

    // What the next checkpoint's staging pool must hold: its entries as startLocked() places them.
    std::size_t stagingBytesNeeded() const
    {
        std::uint64_t offset = 0;
        auto place = [&](std::uint64_t size) { offset = io::roundUp(offset, kEntryAlignment) + size; };
        for (const auto& [name, spec] : regions)
            place(partOf(spec).length);
        for (const auto& [name, bytes] : blobs)
            place(bytes.size());
        return io::roundUp(std::max<std::size_t>(io::roundUp(offset, io::kDirectAlignment), 1), kPoolGranule);
    }

    // The part of a region this rank writes: [from, from + length) of its memory, at `at` of an array of
    // globalSize bytes.
    struct Part {
        std::uint64_t from = 0, length = 0, at = 0, globalSize = 0;
    };
    Part partOf(const RegionSpec& spec) const
    {
        if (distributed && spec.layout.kind == RegionLayout::Kind::Replicated) {
            auto [begin, end] = replicatedPart(spec.size, rank(), worldSize());
            return { begin, end - begin, begin, spec.size };
        }
        if (distributed && spec.layout.kind == RegionLayout::Kind::Sharded)
            return { 0, spec.size, spec.layout.offset, spec.layout.globalSize };
        return { 0, spec.size, 0, spec.size };
    }

    void waitSnapshotLocked(std::unique_lock<std::mutex>& lock)
    {
        changed.wait(lock, [this] { return copiesRemaining == 0 && !(deviceCopiesPending && inFlight); });
    }

    void startLocked(std::uint64_t iteration, CheckpointFlags flags);
    void waitForHandoverOnce(RestoreResult& result);
    void persistLoop();
    void persist(Job& job);
    void commit(Job& job, double snapshotSeconds, Clock::time_point persistStart);
    void commitSharded(Job& job, double snapshotSeconds, Clock::time_point persistStart, std::string error);
    nlohmann::json shardDescription(const Job& job, const std::string& error) const;
    void writeData(Job& job, const fs::path& file);
    nlohmann::json manifestDocument(
        const Job& job, double snapshotSeconds, Clock::time_point persistStart) const;
    int rank() const { return distributed ? coordinator->rank() : 0; }
    int worldSize() const { return distributed ? coordinator->size() : 1; }
    struct Candidate;
    std::string prepareCandidate(const fs::path& dir, Candidate& candidate, bool& fatal);
    void applyCandidate(const Candidate& candidate, RestoreResult& result);
    RestoreResult restoreCollective(RestoreResult result);
    void startTwoLevel();
    // A checkpoint restore() may take: the chain directory's, and with two levels the node-local ones.
    struct Source : CheckpointInfo {
        bool local = false;
    };
    std::vector<Source> restoreSources(std::optional<std::uint64_t>& newestShared);
    void afterCommit(const Job& job, std::string& error);
    // Where this process commits checkpoints: the node-local directory with two levels (with several
    // ranks, this rank's directory inside it), else the chain.
    const fs::path& commitDir() const { return drainer ? localLevel : options.chainDir; }

    Options options;
    std::shared_ptr<Coordinator> coordinator; // options.coordinator
    bool distributed = false; // a coordinator of more than one rank
    std::string leaderTag; // rank 0's temporaryOwnerTag(): names the shared temporary directories
    std::uint64_t checkpointSequence = 0;
    std::unique_ptr<DeviceBackend> backend;
    ThreadPool pool;
    std::byte* staging = nullptr;
    std::size_t stagingCapacity = 0;
    StagingReserve reserve { pool }; // after `backend` and `pool`: destroyed before them
    bool stagingPrepared = false; // prepareStaging() ran for the regions registered now

    mutable std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, RegionSpec> regions;
    std::map<std::string, std::vector<std::byte>> blobs;
    std::map<std::string, nlohmann::json> fields;
    std::uint64_t epoch = 0;
    bool deviceSnapshot = false;
    bool scheduled = false;

    bool inFlight = false;
    std::size_t copiesRemaining = 0;
    Clock::time_point snapshotStartedAt;
    Clock::time_point snapshotDoneAt;
    bool deviceCopiesPending = false;
    std::vector<DeviceCopy> streamsToOrder;
    std::optional<Job> queued;
    bool stopping = false;

    CheckpointStats stats;
    Counters counters;
    std::string lastError;
    bool lastCommitted = true;
    bool handoverChecked = false; // restore() waits for a handover only the first time
    DirectoryCommitter committer { [this](const std::string& message) { log(message); } }; // of commitDir()
    std::unique_ptr<Drainer> drainer; // two levels: copies committed checkpoints to the chain directory
    std::string nodeName; // recorded in node-local manifests
    fs::path localLevel; // two levels: options.localDir, or its rank-R with several ranks

    std::thread persister;
};

void Checkpointer::Impl::startLocked(std::uint64_t iteration, CheckpointFlags flags)
{
    Job job;
    job.iteration = iteration;
    job.flags = flags;
    job.epoch = epoch;
    job.fields = fields;
    job.requestedAt = Clock::now();
    job.sequence = checkpointSequence++;
    const std::string dirName = checkpointDirName(iteration);
    job.temporary = distributed && !drainer
        ? options.chainDir / ("." + dirName + ".s" + std::to_string(job.sequence) + ".tmp-" + leaderTag)
        : commitDir() / ("." + dirName + ".tmp-" + temporaryOwnerTag());

    // With several ranks each writes its own file; a replicated region is written in parts, one per rank,
    // and a sharded one as this rank's shard.
    const int ownRank = rank();
    const std::string file = distributed ? shardFileName(ownRank) : std::string(kDataFileName);
    std::uint64_t offset = 0;
    auto place = [&](const std::string& name, std::size_t size, int device) {
        offset = io::roundUp(offset, kEntryAlignment);
        ManifestEntry entry { name, file, offset, size, 0, device };
        entry.rank = ownRank;
        entry.globalSize = size;
        offset += size;
        return entry;
    };
    std::vector<std::uint64_t> sourceOffsets; // where each region's entry starts in its memory
    for (const auto& [name, spec] : regions) {
        const Part part = partOf(spec);
        ManifestEntry entry = place(name, part.length, spec.device);
        if (distributed)
            entry.layout = layoutName(spec.layout.kind);
        entry.at = part.at;
        entry.globalSize = part.globalSize;
        job.regions.push_back(std::move(entry));
        sourceOffsets.push_back(part.from);
    }
    for (const auto& [name, bytes] : blobs)
        job.blobs.push_back(place(name, bytes.size(), -1));
    job.totalBytes = offset;

    const auto stagingBegin = Clock::now();
    ensureStaging(io::roundUp(job.totalBytes, io::kDirectAlignment));
    const double stagingSeconds = seconds(Clock::now() - stagingBegin);
    // Padding must be zero on disk: the reader checks it, so that no byte of a data file goes unchecked.
    std::uint64_t end = 0;
    auto zeroGapBefore = [&](const ManifestEntry& e) {
        std::memset(staging + end, 0, e.offset - end);
        end = e.offset + e.size;
    };
    std::vector<Piece> hostCopies;
    std::vector<DeviceCopy> deviceCopies;
    for (std::size_t i = 0; i < job.regions.size(); ++i) {
        const auto& entry = job.regions[i];
        zeroGapBefore(entry);
        const auto& spec = regions.at(entry.name);
        if (spec.device < 0)
            hostCopies.push_back({ staging + entry.offset,
                static_cast<const std::byte*>(spec.data) + sourceOffsets[i], entry.size });
        else
            deviceCopies.push_back(
                { staging + entry.offset, static_cast<std::byte*>(spec.data) + sourceOffsets[i], entry.size,
                    spec.device, spec.stream });
    }
    for (const auto& entry : job.blobs) {
        zeroGapBefore(entry);
        const auto& bytes = blobs.at(entry.name);
        if (!bytes.empty())
            std::memcpy(staging + entry.offset, bytes.data(), bytes.size());
    }

    backend->beginSnapshot(deviceCopies, deviceSnapshot);
    job.hasDeviceCopies = !deviceCopies.empty();
    deviceCopiesPending = job.hasDeviceCopies;
    streamsToOrder = std::move(deviceCopies);

    auto tasks = makeCopyTasks(hostCopies, pool.size());
    copiesRemaining = tasks.size();
    snapshotDoneAt = job.requestedAt;
    snapshotStartedAt = job.requestedAt;
    inFlight = true;
    ++counters.requested;
    stats = CheckpointStats {};
    stats.stagingSeconds = stagingSeconds;
    stats.iteration = iteration;
    stats.bytes = job.totalBytes;
    stats.final = flags.final;
    stats.trainingDone = flags.trainingDone;
    for (auto& task : tasks) {
        pool.post([this, task = std::move(task)] {
            copyPieces(task);
            std::lock_guard lock(mutex);
            if (--copiesRemaining == 0) {
                snapshotDoneAt = Clock::now();
                // Known as soon as beforeUpdate() returns, not only after the persist.
                stats.snapshotSeconds = seconds(snapshotDoneAt - snapshotStartedAt);
                changed.notify_all();
            }
        });
    }
    queued = std::move(job);
    changed.notify_all();
}

void Checkpointer::Impl::persistLoop()
{
    for (;;) {
        Job job;
        {
            std::unique_lock lock(mutex);
            changed.wait(lock, [this] { return stopping || queued.has_value(); });
            if (!queued)
                return;
            job = std::move(*queued);
            queued.reset();
        }
        persist(job);
    }
}

void Checkpointer::Impl::persist(Job& job)
{
    std::string error;
    double snapshotSeconds = 0;
    Clock::time_point persistStart = Clock::now();
    try {
        {
            std::unique_lock lock(mutex);
            changed.wait(lock, [this] { return copiesRemaining == 0; });
        }
        if (job.hasDeviceCopies)
            backend->finishSnapshot();
        {
            std::lock_guard lock(mutex);
            if (job.hasDeviceCopies) {
                snapshotDoneAt = Clock::now();
                deviceCopiesPending = false;
            }
            snapshotSeconds = seconds(snapshotDoneAt - job.requestedAt);
            stats.snapshotSeconds = snapshotSeconds;
        }
        changed.notify_all();
        persistStart = Clock::now();
        if (!distributed || drainer)
            commit(job, snapshotSeconds, persistStart);
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (distributed && !drainer) {
        // Reached whatever happened above: the other ranks wait for this one's part in the commit.
        try {
            commitSharded(job, snapshotSeconds, persistStart, error);
            error.clear();
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    const double persistSeconds = seconds(Clock::now() - persistStart);

    if (error.empty()) {
        afterCommit(job, error);
        if (!error.empty())
            log("checkpoint of iteration " + std::to_string(job.iteration) + ": " + error);
    } else {
        std::error_code ec;
        // With several ranks the others may still write into the chain's temporary directory until
        // rank 0 gives up; a rank's node-local one is its own.
        if (rank() == 0 || drainer)
            fs::remove_all(job.temporary, ec);
        log("checkpoint of iteration " + std::to_string(job.iteration)
            + " failed, training continues and the previous checkpoint stays valid: " + error);
        // Two levels with several ranks: the others drain this iteration in a round this rank must join,
        // where its missing copy fails it for all.
        if (distributed && drainer)
            drainer->submit(commitDir() / checkpointDirName(job.iteration), job.iteration, false);
    }

    std::lock_guard lock(mutex);
    stats.persistSeconds = persistSeconds;
    stats.finished = true;
    stats.committed = error.empty();
    stats.error = error;
    lastError = error;
    lastCommitted = error.empty();
    ++(error.empty() ? counters.committed : counters.failed);
    deviceCopiesPending = false;
    inFlight = false;
    changed.notify_all();
}

// Writes the staged bytes of `job` to `file` and makes them durable; the entries' checksums are
// computed on the (otherwise idle) copy threads while the data goes to the device.
void Checkpointer::Impl::writeData(Job& job, const fs::path& file)
{
    std::vector<ManifestEntry*> small; // declared first: outlives the tasks that read it
    TaskGroup hashing(pool);
    for (auto* list : { &job.regions, &job.blobs }) {
        for (auto& entry : *list) {
            if (entry.size >= (1 << 20))
                hashing.post(
                    [this, &entry] { entry.checksum = checksum(staging + entry.offset, entry.size); });
            else
                small.push_back(&entry);
        }
    }
    hashing.post([this, &small] {
        for (auto* entry : small)
            entry->checksum = checksum(staging + entry->offset, entry->size);
    });
    io::writeFileDurably(file, staging, job.totalBytes, options.directIo, options.fileMode);
    hashing.wait();
}

nlohmann::json Checkpointer::Impl::manifestDocument(
    const Job& job, double snapshotSeconds, Clock::time_point persistStart) const
{
    nlohmann::json document = nlohmann::json::object();
    for (const auto& [key, value] : job.fields)
        document[key] = value;
    if (!document.contains("sampler"))
        document["sampler"] = nullptr;
    if (!document.contains("tuning"))
        document["tuning"] = nlohmann::json::object();
    document["format_version"] = kFormatVersion;
    document["iteration"] = job.iteration;
    document["epoch"] = job.epoch;
    document["total_bytes"] = job.totalBytes;
    document["regions"] = entriesToJson(job.regions);
    document["blobs"] = entriesToJson(job.blobs);
    document["files"] = nlohmann::json::array({ { { "name", kDataFileName }, { "size", job.totalBytes } } });
    document["library_version"] = BATON_VERSION;
    document["job_id"] = optionalNumber(options.jobId);
    document["restart_count"] = optionalNumber(options.restartCount);
    document["final"] = job.flags.final;
    document["training_done"] = job.flags.trainingDone;
    document["timings"] = { { "snapshot_seconds", snapshotSeconds },
        { "persist_seconds", seconds(Clock::now() - persistStart) } };
    document["created_unix"] = unixNow();
    if (drainer)
        document["node"] = nodeName;
    return document;
}

// Retention, and with two levels the drain: a final or training_done checkpoint is done only once its
// copy in the chain directory has committed, since only that copy counts for the successor.
void Checkpointer::Impl::afterCommit(const Job& job, std::string& error)
{
    try {
        // Retention in the chain is rank 0's alone: ranks never remove each other's work. Node-locally
        // each rank keeps its own directory.
        // With several ranks the drain takes the newest iteration every rank has: a rank a checkpoint
        // ahead keeps the one before too.
        if (rank() == 0 || drainer)
            pruneChain(commitDir(), drainer ? std::max(options.localKeep, distributed ? 2 : 1) : options.keep,
                drainer ? drainer->needed() : std::set<std::uint64_t> {});
    } catch (const std::exception& e) {
        log(std::string("warning: retention failed (the new checkpoint is committed): ") + e.what());
    }
    if (!drainer)
        return;
    const bool last = job.flags.final || job.flags.trainingDone;
    drainer->submit(commitDir() / checkpointDirName(job.iteration), job.iteration, last);
    if (last && !drainer->waitFor(job.iteration))
        error = "committed in the node-local directory, but its copy in the chain directory did not commit: "
            + drainer->status().lastError;
}

// Commits what this process wrote, alone, in commitDir(): a single process's checkpoint, or with two
// levels and several ranks this rank's shard. The shard's record is its description (and on rank 0 the
// checkpoint's fields), from which the drain's collective commit assembles the chain's manifest; it is no
// manifest, since only the chain's copy is a checkpoint.
void Checkpointer::Impl::commit(Job& job, double snapshotSeconds, Clock::time_point persistStart)
{
    std::error_code ec;
    fs::remove_all(job.temporary, ec);
    if (::mkdir(job.temporary.c_str(), static_cast<mode_t>(io::directoryMode(options.fileMode))) != 0)
        io::throwErrno("cannot create " + job.temporary.string());
    writeData(job, job.temporary / (distributed ? shardFileName(rank()) : std::string(kDataFileName)));
    std::string text;
    if (distributed) {
        nlohmann::json record = shardDescription(job, "");
        record["world_size"] = worldSize();
        if (rank() == 0)
            record["manifest"] = manifestDocument(job, snapshotSeconds, persistStart);
        text = record.dump();
    } else {
        text = renderManifest(manifestDocument(job, snapshotSeconds, persistStart));
    }
    // The commit point: the complete directory appears under its final name in one rename.
    committer.commitWithManifest(
        job.temporary, text, commitDir() / checkpointDirName(job.iteration), options.fileMode);
}

// What rank 0 needs to name this rank's shard in the manifest, or why there is none.
nlohmann::json Checkpointer::Impl::shardDescription(const Job& job, const std::string& error) const
{
    return { { "rank", rank() }, { "iteration", job.iteration }, { "file", shardFileName(rank()) },
        { "size", job.totalBytes }, { "regions", entriesToJson(job.regions, true) },
        { "blobs", entriesToJson(job.blobs, true) }, { "error", error } };
}

// Every rank writes its shard into the shared temporary directory in parallel and tells rank 0 what it
// wrote (or why it could not); rank 0 commits only when every shard is durable, with one manifest and
// one rename, and tells every rank the outcome. Every rank takes part in both collectives whatever
// happened before, so that a failure on one rank fails the checkpoint on all instead of stalling them.
void Checkpointer::Impl::commitSharded(
    Job& job, double snapshotSeconds, Clock::time_point persistStart, std::string error)
{
    const int ownRank = rank();
    const std::string file = shardFileName(ownRank);
    if (error.empty()) {
        try {
            // Whichever rank comes first creates the directory; its name is this checkpoint's alone.
            if (::mkdir(job.temporary.c_str(), static_cast<mode_t>(io::directoryMode(options.fileMode))) != 0
                && errno != EEXIST)
                io::throwErrno("cannot create " + job.temporary.string());
            writeData(job, job.temporary / file);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    const auto shards = coordinator->allGather("shards", shardDescription(job, error).dump());

    std::string outcome; // empty: committed
    if (ownRank == 0) {
        try {
            const std::string text = shardedManifest(
                manifestDocument(job, snapshotSeconds, persistStart), shards, job.temporary, job.iteration);
            committer.commitWithManifest(
                job.temporary, text, options.chainDir / checkpointDirName(job.iteration), options.fileMode);
        } catch (const std::exception& e) {
            outcome = e.what();
            if (outcome.empty())
                outcome = "unknown error";
        }
    }
    outcome = coordinator->broadcast("commit", outcome, 0);
    if (!outcome.empty())
        throw Error(ownRank == 0 ? outcome : "rank 0 did not commit: " + outcome);
}

Checkpointer::Checkpointer(Options options)
{
    options.validate();
    std::error_code ec;
    io::createDirectories(options.chainDir, io::directoryMode(options.fileMode));
    if (!fs::is_directory(options.chainDir, ec))
        throw Error("chain directory " + options.chainDir.string() + " is not a directory");
    options.identifyFromEnvironment();
    auto impl = std::make_unique<Impl>(std::move(options));
    // Only one process cleans the chain: with several ranks, rank 0, before the first collective, so
    // that no rank can have started writing into what it removes.
    if (impl->rank() == 0) {
        removeStaleTemporaries(impl->options.chainDir);
        removeStaleCoordinatorSessions(impl->options.chainDir);
    }
    if (impl->distributed) {
        // Every rank learns rank 0's tag (it names the shared temporary directories, so that rank 0's
        // clean-up knows when their writer is gone) and that all agree on the world.
        nlohmann::json hello = { { "tag", temporaryOwnerTag() }, { "size", impl->coordinator->size() } };
        auto all = impl->coordinator->allGather("hello", hello.dump());
        for (std::size_t r = 0; r < all.size(); ++r) {
            auto other = nlohmann::json::parse(all[r], nullptr, false);
            if (other.is_discarded() || !other.is_object()
                || other.value("size", -1) != impl->coordinator->size())
                throw ConfigError("rank " + std::to_string(r) + " does not agree on the world size "
                    + std::to_string(impl->coordinator->size()));
        }
        impl->leaderTag = nlohmann::json::parse(all[0]).value("tag", std::string());
        if (impl->leaderTag.empty())
            throw Error("rank 0 sent no temporary directory tag");
    }
    impl_ = std::move(impl);
    if (!impl_->options.localDir.empty())
        impl_->startTwoLevel();
    if (impl_->options.stagingBytes > 0)
        impl_->ensureStaging(impl_->options.stagingBytes);
    impl_->persister = std::thread([impl = impl_.get()] { impl->persistLoop(); });
}

// The node-local directory must be this user's own: on a node's scratch disk another user could have
// made the path first, and would then read or replace this chain's checkpoints. Whatever keeps two levels
// from working leaves one: training goes on, checkpointing to the chain directory.
void Checkpointer::Impl::startTwoLevel()
{
    // With several ranks the decision is collective: either every rank has a usable node-local
    // directory or all use one level, since the chain's commit needs every rank's part.
    std::string unusable;
    const fs::path level = distributed ? options.localDir / ("rank-" + std::to_string(rank())) : options.localDir;
    try {
        for (const auto& dir : { options.localDir, level }) {
            io::createDirectories(dir, io::directoryMode(options.fileMode));
            struct stat st { };
            if (::lstat(dir.c_str(), &st) != 0)
                io::throwErrno("cannot examine " + dir.string());
            if (!S_ISDIR(st.st_mode))
                throw Error(dir.string() + " is not a directory");
            if (st.st_uid != ::geteuid())
                throw Error(dir.string() + " belongs to uid " + std::to_string(st.st_uid)
                    + ", not to this process's user");
        }
        removeStaleTemporaries(level);
    } catch (const std::exception& e) {
        unusable = e.what();
    }
    if (distributed) {
        for (const auto& other : coordinator->allGather("two-level", unusable)) {
            if (unusable.empty() && !other.empty())
                unusable = "another rank's: " + other;
        }
    }
    if (!unusable.empty()) {
        log("node-local directory unusable, checkpointing to the chain directory only: " + unusable);
        return;
    }
    localLevel = level;
    nodeName = options.nodeName;
    if (const char* slurmNode = std::getenv("SLURMD_NODENAME"); nodeName.empty() && slurmNode != nullptr)
        nodeName = slurmNode;
    if (char host[256] = {}; nodeName.empty() && ::gethostname(host, sizeof host - 1) == 0)
        nodeName = host;
    DrainSettings settings;
    settings.sharedDir = options.chainDir;
    settings.keep = options.keep;
    settings.fileMode = options.fileMode;
    settings.bytesPerSecond = options.drainBytesPerSecond;
    settings.log = [this](const std::string& message) { log(message); };
    if (distributed) {
        settings.coordinator = coordinator;
        settings.leaderTag = leaderTag;
    }
    drainer = std::make_unique<Drainer>(std::move(settings));
}

Checkpointer::~Checkpointer()
{
    {
        std::unique_lock lock(impl_->mutex);
        impl_->changed.wait(lock, [this] { return !impl_->inFlight; });
    }
    // The newest checkpoint reaches the chain directory before the process goes: its node-local copy is
    // of no use to a successor on another node.
    waitDurable();
    {
        std::lock_guard lock(impl_->mutex);
        impl_->stopping = true;
    }
    impl_->changed.notify_all();
    impl_->persister.join();
    if (impl_->staging != nullptr)
        impl_->backend->freeStaging(impl_->staging, impl_->stagingCapacity);
}

void Checkpointer::registerRegion(const std::string& name, void* data, std::size_t size)
{
    validateName("region", name);
    if (data == nullptr && size > 0)
        throw Error("region '" + name + "': null pointer with a non-zero size");
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock); // the in-flight snapshot may still read the old address
    auto& spec = impl_->regions[name];
    spec = RegionSpec { data, size, -1, nullptr, spec.layout }; // a new address keeps the layout
    impl_->stagingPrepared = false;
}

void Checkpointer::registerDeviceRegion(
    const std::string& name, void* devicePtr, std::size_t size, int device, void* stream)
{
    validateName("region", name);
    if (device < 0)
        throw Error("region '" + name + "': device must be >= 0");
    impl_->backend->checkDeviceRegion(devicePtr, size, device);
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock);
    auto& spec = impl_->regions[name];
    spec = RegionSpec { devicePtr, size, device, stream, spec.layout };
    impl_->stagingPrepared = false;
}

void Checkpointer::unregisterRegion(const std::string& name)
{
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock);
    impl_->regions.erase(name);
    impl_->stagingPrepared = false;
}

void Checkpointer::setRegionLayout(const std::string& name, RegionLayout layout)
{
    std::unique_lock lock(impl_->mutex);
    auto found = impl_->regions.find(name);
    if (found == impl_->regions.end())
        throw Error("region '" + name + "' is not registered: register it before setting its layout");
    if (layout.kind == RegionLayout::Kind::Sharded
        && (layout.offset > layout.globalSize || found->second.size > layout.globalSize - layout.offset))
        throw Error("region '" + name + "': a shard of " + std::to_string(found->second.size) + " bytes at "
            + std::to_string(layout.offset) + " does not lie within an array of "
            + std::to_string(layout.globalSize) + " bytes");
    if (layout.kind != RegionLayout::Kind::Sharded)
        layout.offset = layout.globalSize = 0;
    impl_->waitSnapshotLocked(lock);
    found->second.layout = layout;
}

int Checkpointer::rank() const
{
    return impl_->rank();
}

int Checkpointer::worldSize() const
{
    return impl_->worldSize();
}

void Checkpointer::setBlob(const std::string& name, std::span<const std::byte> bytes)
{
    validateName("blob", name);
    std::lock_guard lock(impl_->mutex);
    impl_->blobs[name].assign(bytes.begin(), bytes.end());
}

void Checkpointer::setBlob(const std::string& name, std::string_view bytes)
{
    setBlob(name, std::as_bytes(std::span(bytes.data(), bytes.size())));
}

void Checkpointer::removeBlob(const std::string& name)
{
    std::lock_guard lock(impl_->mutex);
    impl_->blobs.erase(name);
}

void Checkpointer::setEpoch(std::uint64_t epoch)
{
    std::lock_guard lock(impl_->mutex);
    impl_->epoch = epoch;
}

void Checkpointer::setManifestField(const std::string& key, nlohmann::json value)
{
    validateName("manifest field", key);
    if (std::find(kReservedFields.begin(), kReservedFields.end(), key) != kReservedFields.end())
        throw Error("manifest field '" + key + "' is reserved by the format");
    try {
        (void)value.dump(); // throws for a string that is not UTF-8: refused now, not at every commit
    } catch (const nlohmann::json::exception& e) {
        throw Error("manifest field '" + key + "': its value cannot be written as JSON: " + e.what());
    }
    std::lock_guard lock(impl_->mutex);
    impl_->fields[key] = std::move(value);
}

void Checkpointer::setDeviceSnapshot(bool onDevice)
{
    std::lock_guard lock(impl_->mutex);
    impl_->deviceSnapshot = onDevice;
}

void Checkpointer::afterUpdate(std::uint64_t iteration)
{
    bool start = false;
    {
        std::lock_guard lock(impl_->mutex);
        start = std::exchange(impl_->scheduled, false);
        if (!impl_->stagingPrepared)
            impl_->prepareStagingLocked();
    }
    if (start)
        requestCheckpoint(iteration);
}

void Checkpointer::prepareStaging()
{
    std::lock_guard lock(impl_->mutex);
    impl_->prepareStagingLocked();
}

void Checkpointer::beforeUpdate()
{
    auto begin = Clock::now();
    std::unique_lock lock(impl_->mutex);
    bool waited = impl_->copiesRemaining > 0;
    impl_->changed.wait(lock, [this] { return impl_->copiesRemaining == 0; });
    if (!impl_->streamsToOrder.empty()) {
        impl_->backend->orderAfterSnapshot(impl_->streamsToOrder);
        impl_->streamsToOrder.clear();
    }
    if (waited)
        impl_->stats.stallSeconds += seconds(Clock::now() - begin);
}

bool Checkpointer::requestCheckpoint(std::uint64_t iteration, CheckpointFlags flags)
{
    std::unique_lock lock(impl_->mutex);
    if (impl_->distributed) // a rank that dropped a request would leave the others waiting for it
        impl_->changed.wait(lock, [this] { return !impl_->inFlight; });
    if (impl_->inFlight) {
        ++impl_->counters.droppedRequests;
        lock.unlock();
        impl_->log("checkpoint request for iteration " + std::to_string(iteration)
            + " dropped: the previous checkpoint is still in flight");
        return false;
    }
    try {
        impl_->startLocked(iteration, flags);
    } catch (const std::exception& e) {
        ++impl_->counters.failed;
        impl_->lastError = e.what();
        impl_->lastCommitted = false;
        lock.unlock();
        impl_->log("checkpoint of iteration " + std::to_string(iteration) + " could not start: " + e.what());
        return false;
    }
    return true;
}

void Checkpointer::scheduleCheckpoint()
{
    std::lock_guard lock(impl_->mutex);
    impl_->scheduled = true;
}

bool Checkpointer::checkpointNow(std::uint64_t iteration, CheckpointFlags flags)
{
    wait();
    if (!requestCheckpoint(iteration, flags))
        return false;
    return wait();
}

bool Checkpointer::wait()
{
    std::unique_lock lock(impl_->mutex);
    impl_->changed.wait(lock, [this] { return !impl_->inFlight; });
    return impl_->lastCommitted;
}

bool Checkpointer::inFlight() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->inFlight;
}

// A successor may start while its predecessor still writes the handover checkpoint: restoring the
// newest checkpoint before that one commits would resume from stale state.
void Checkpointer::Impl::waitForHandoverOnce(RestoreResult& result)
{
    if (std::exchange(handoverChecked, true) || options.handoverWaitSeconds <= 0 || !options.restartCount
        || *options.restartCount == 0)
        return;
    const std::uint64_t previous = *options.restartCount - 1;
    log("handover: waiting up to " + std::to_string(static_cast<long long>(options.handoverWaitSeconds))
        + " s for a final checkpoint of restart " + std::to_string(previous) + " or later");
    const HandoverWaitResult wait = waitForHandover(options.chainDir, previous, options.handoverWaitSeconds);
    result.handoverWaitSeconds = wait.seconds;
    result.handoverTimedOut = !wait.found;
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.1f", wait.seconds);
    if (wait.found)
        log("handover: " + wait.checkpoint.filename().string() + " is final, found after " + waited + " s");
    else
        log(std::string("handover: no final checkpoint of restart ") + std::to_string(previous) + " after "
            + waited + " s, restoring the newest verified checkpoint");
}

// What one rank restores from one checkpoint: the data files it reads into the staging pool (each at
// its own offset there) and the pieces it then copies into its registered regions.
struct Checkpointer::Impl::Candidate {
    struct Copy {
        std::string region;
        std::uint64_t from = 0; // offset in the staging pool
        std::uint64_t size = 0;
        std::uint64_t to = 0; // offset in the registered region
    };
    fs::path dir;
    Manifest manifest;
    std::vector<Copy> copies;
    std::vector<Copy> blobs;
    std::vector<std::string> unclaimed;
};

// Plans and verifies this rank's part of `dir`. Returns why it cannot be restored (empty: it can), with
// `fatal` set when no older checkpoint can help either (a newer format, a layout this world cannot map,
// sizes that differ from the registered ones).
std::string Checkpointer::Impl::prepareCandidate(const fs::path& dir, Candidate& candidate, bool& fatal)
{
    candidate.dir = dir;
    Manifest& manifest = candidate.manifest;
    try {
        manifest = parseManifest(io::readSmallFile(dir / kManifestName));
    } catch (const FormatError& e) {
        fatal = true;
        return e.what();
    } catch (const Error& e) {
        return e.what();
    }
    if (manifest.iteration
        != parseCheckpointDirName(dir.filename().string()).value_or(manifest.iteration + 1))
        return "manifest iteration " + std::to_string(manifest.iteration) + " does not match the directory";
    if (std::string reason = checkLayout(dir, manifest); !reason.empty())
        return reason;
    const int saved = manifest.worldSize;
    const int ranks = worldSize();
    const int ownRank = rank();

    std::map<std::string, std::uint64_t> fileAt; // staging offset of each data file this rank reads
    std::uint64_t stagingBytes = 0;
    auto need = [&](const std::string& file) {
        auto [it, added] = fileAt.try_emplace(file, 0);
        if (added) {
            it->second = stagingBytes;
            for (const auto& f : manifest.files) {
                if (f.name == file)
                    stagingBytes = io::roundUp(stagingBytes + f.size, io::kDirectAlignment);
            }
        }
        return it->second;
    };
    auto refuse = [&](const std::string& why) {
        fatal = true;
        return why;
    };

    std::map<std::string, std::vector<const ManifestEntry*>> byName;
    for (const auto& entry : manifest.regions)
        byName[entry.name].push_back(&entry);
    for (const auto& [name, entries] : byName) {
        auto found = regions.find(name);
        if (found == regions.end()) {
            candidate.unclaimed.push_back(name);
            continue;
        }
        const RegionSpec& spec = found->second;
        const char* registeredAs = layoutName(spec.layout.kind);
        // A world of one wrote every region whole: any layout can take it.
        const bool perRankSaved = entries.front()->layout == kLayoutRank && saved > 1;
        if (perRankSaved) {
            if (spec.layout.kind != RegionLayout::Kind::PerRank)
                return refuse("region '" + name + "' holds each rank's own bytes in " + dir.string()
                    + " but is registered " + registeredAs + ": that layout cannot be mapped");
            if (saved != ranks)
                return refuse("region '" + name + "' holds each rank's own bytes, saved by "
                    + std::to_string(saved) + " ranks in " + dir.string() + ": it cannot be restored on "
                    + std::to_string(ranks)
                    + " ranks (register data-parallel state replicated, or sharded along its first "
                      "dimension)");
            const ManifestEntry* own = nullptr;
            for (const auto* entry : entries) {
                if (entry->rank == ownRank)
                    own = entry;
            }
            if (own == nullptr)
                return "region '" + name + "' has no part of rank " + std::to_string(ownRank);
            if (own->size != spec.size)
                return refuse("region '" + name + "' has " + std::to_string(own->size) + " bytes in "
                    + dir.string() + " but " + std::to_string(spec.size) + " bytes are registered");
            candidate.copies.push_back({ name, need(own->file) + own->offset, own->size, 0 });
            continue;
        }
        // One array of globalSize bytes, in pieces: this rank takes the window it registered.
        std::uint64_t begin = 0, globalSize = spec.size;
        if (spec.layout.kind == RegionLayout::Kind::Sharded) {
            begin = spec.layout.offset;
            globalSize = spec.layout.globalSize;
        }
        const std::uint64_t end = begin + spec.size;
        if (entries.front()->globalSize != globalSize)
            return refuse("region '" + name + "' has " + std::to_string(entries.front()->globalSize)
                + " bytes in " + dir.string() + " but " + std::to_string(globalSize) + " bytes are registered"
                + (spec.layout.kind == RegionLayout::Kind::Sharded ? " (the whole sharded array)" : ""));
        for (const auto* entry : entries) {
            const std::uint64_t from = std::max(begin, entry->at);
            const std::uint64_t to = std::min(end, entry->at + entry->size);
            if (from < to)
                candidate.copies.push_back({ name, need(entry->file) + entry->offset + (from - entry->at),
                    to - from, from - begin });
        }
    }
    // Blobs are each rank's own; on another world size every rank takes rank 0's (data-parallel ranks
    // hold the same step counters and sampler state).
    const int blobRank = saved == ranks ? ownRank : 0;
    for (const auto& entry : manifest.blobs) {
        if (entry.rank == blobRank)
            candidate.blobs.push_back({ entry.name, need(entry.file) + entry.offset, entry.size, 0 });
    }
    // Sizes were checked against the files on disk (checkLayout): the allocation follows real files.
    ensureStaging(std::max<std::uint64_t>(stagingBytes, io::kDirectAlignment));
    for (const auto& [file, at] : fileAt) {
        std::string reason = readAndVerifyFile(dir, manifest, file, staging + at, options.directIo);
        if (!reason.empty())
            return reason;
    }
    return {};
}

// What a restore reports about the checkpoint it took, from that checkpoint's manifest.
static void describeRestored(
    RestoreResult& result, const Manifest& manifest, const std::filesystem::path& dir)
{
    result.restored = true;
    result.iteration = manifest.iteration;
    result.epoch = manifest.epoch;
    result.dir = dir;
    result.jobId = manifest.jobId;
    result.restartCount = manifest.restartCount;
    result.final = manifest.final;
    result.trainingDone = manifest.trainingDone;
}

void Checkpointer::Impl::applyCandidate(const Candidate& candidate, RestoreResult& result)
{
    std::vector<Piece> hostCopies;
    for (const auto& copy : candidate.copies) {
        const RegionSpec& spec = regions.at(copy.region);
        if (copy.size == 0)
            continue;
        if (spec.device < 0)
            hostCopies.push_back(
                { static_cast<std::byte*>(spec.data) + copy.to, staging + copy.from, copy.size });
        else
            backend->restoreToDevice({ staging + copy.from, static_cast<std::byte*>(spec.data) + copy.to,
                copy.size, spec.device, spec.stream });
    }
    TaskGroup copies(pool);
    for (auto& task : makeCopyTasks(hostCopies, pool.size()))
        copies.post([task = std::move(task)] { copyPieces(task); });
    copies.wait();
    for (const auto& blob : candidate.blobs)
        result.blobs[blob.region].assign(staging + blob.from, staging + blob.from + blob.size);
    const Manifest& manifest = candidate.manifest;
    describeRestored(result, manifest, candidate.dir);
    result.manifest = manifest.document;
    result.unclaimedRegions = candidate.unclaimed;
    epoch = result.epoch;
}

// Rank 0's list of the chain is the one every rank walks; each candidate's verdicts are gathered so that
// all restore the same checkpoint or skip it together.
RestoreResult Checkpointer::Impl::restoreCollective(RestoreResult result)
{
    nlohmann::json listing = nlohmann::json::object();
    if (rank() == 0) {
        try {
            auto list = nlohmann::json::array();
            auto checkpoints = listCheckpoints(options.chainDir);
            for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it)
                list.push_back({ { "name", it->dir.filename().string() }, { "committed", it->committed },
                    { "stat_error", it->statError } });
            listing["checkpoints"] = std::move(list);
        } catch (const std::exception& e) {
            listing["error"] = e.what();
        }
    }
    listing = nlohmann::json::parse(coordinator->broadcast("restore-list", listing.dump(), 0));
    if (listing.contains("error"))
        throw Error("rank 0 could not list the chain: " + listing["error"].get<std::string>());
    for (const auto& item : listing["checkpoints"]) {
        const fs::path dir = options.chainDir / item["name"].get<std::string>();
        auto skip = [&](const std::string& reason) {
            log("skipping " + dir.string() + ": " + reason);
            result.fallbacks.push_back({ dir, reason });
        };
        if (int error = item["stat_error"].get<int>(); error != 0) {
            skip(io::IoError(error, "cannot examine " + (dir / kManifestName).string()).what());
            continue;
        }
        if (!item["committed"].get<bool>()) {
            skip("not committed (no manifest.json): an interrupted checkpoint");
            continue;
        }
        Candidate candidate;
        bool fatal = false;
        bool format = false;
        std::string reason;
        try {
            reason = prepareCandidate(dir, candidate, fatal);
        } catch (const std::exception& e) {
            reason = e.what();
            fatal = true;
        }
        format = fatal && reason.find("format_version") != std::string::npos;
        nlohmann::json verdict = { { "reason", reason }, { "fatal", fatal }, { "format", format } };
        auto verdicts = coordinator->allGather("restore-verdict", verdict.dump());
        std::string why;
        for (std::size_t r = 0; r < verdicts.size(); ++r) {
            auto other = nlohmann::json::parse(verdicts[r]);
            const std::string otherReason = other["reason"].get<std::string>();
            if (other["fatal"].get<bool>()) {
                const std::string message = "rank " + std::to_string(r) + ": " + otherReason;
                if (other["format"].get<bool>())
                    throw FormatError(message);
                throw Error(message);
            }
            if (!otherReason.empty() && why.empty())
                why = "rank " + std::to_string(r) + ": " + otherReason;
        }
        if (!why.empty()) {
            skip(why);
            continue;
        }
        applyCandidate(candidate, result);
        return result;
    }
    return result;
}

// Newest first; a node-local copy before the chain directory's copy of the same iteration (it is read at
// local speed). A listing error of the node-local directory leaves its copies out, with a warning.
std::vector<Checkpointer::Impl::Source> Checkpointer::Impl::restoreSources(std::optional<std::uint64_t>& newestShared)
{
    std::vector<Source> all;
    for (const auto& info : listCheckpoints(options.chainDir)) {
        if (info.committed)
            newestShared = std::max(newestShared.value_or(0), info.iteration);
        all.push_back({ info, false });
    }
    if (drainer) {
        try {
            for (const auto& info : listCheckpoints(options.localDir))
                all.push_back({ info, true });
        } catch (const std::exception& e) {
            log(std::string("warning: node-local checkpoints not considered: ") + e.what());
        }
    }
    std::stable_sort(all.begin(), all.end(), [](const Source& a, const Source& b) {
        return a.iteration != b.iteration ? a.iteration > b.iteration : a.local && !b.local;
    });
    return all;
}

RestoreResult Checkpointer::restore()
{
    // With several ranks the drain's rounds use the coordinator: none may be under way while restore's
    // collectives run.
    if (impl_->distributed)
        waitDurable();
    wait();
    RestoreResult result;
    impl_->waitForHandoverOnce(result);
    std::unique_lock lock(impl_->mutex);
    if (impl_->distributed)
        return impl_->restoreCollective(std::move(result));
    std::optional<std::uint64_t> newestShared;
    const auto checkpoints = impl_->restoreSources(newestShared);
    for (auto it = checkpoints.begin(); it != checkpoints.end(); ++it) {
        auto skip = [&](const std::string& reason) {
            impl_->log("skipping " + it->dir.string() + ": " + reason);
            result.fallbacks.push_back({ it->dir, reason });
        };
        if (it->statError != 0) {
            skip(io::IoError(it->statError, "cannot examine " + (it->dir / kManifestName).string()).what());
            continue;
        }
        if (!it->committed) {
            skip("not committed (no manifest.json): an interrupted checkpoint");
            continue;
        }
        Manifest manifest;
        try {
            manifest = parseManifest(io::readSmallFile(it->dir / kManifestName));
        } catch (const FormatError&) {
            throw;
        } catch (const Error& e) {
            skip(e.what());
            continue;
        }
        if (manifest.iteration != it->iteration) {
            skip(
                "manifest iteration " + std::to_string(manifest.iteration) + " does not match the directory");
            continue;
        }
        if (it->local) {
            // A node-local copy is only ever this node's: elsewhere the directory may be another disk
            // that happens to have the same path, or a shared one that several nodes write to.
            const auto node = manifest.document.find("node");
            const std::string writer = node != manifest.document.end() && node->is_string() ? node->get<std::string>() : "";
            if (writer != impl_->nodeName) {
                skip("a node-local copy written on node '" + writer + "', not on this node ('"
                    + impl_->nodeName + "')");
                continue;
            }
        }
        if (manifest.formatVersion >= kShardedFormatVersion) {
            // Written by several ranks: this process takes the replicated and sharded state whole.
            Impl::Candidate candidate;
            bool fatal = false;
            std::string reason = impl_->prepareCandidate(it->dir, candidate, fatal);
            if (fatal)
                throw Error(reason);
            if (!reason.empty()) {
                skip(reason);
                continue;
            }
            impl_->applyCandidate(candidate, result);
            return result;
        }
        // The staging pool is sized by the manifest only after the manifest's layout matched the data file
        // on disk: an absurd total_bytes never turns into an allocation.
        if (std::string reason = checkLayout(it->dir, manifest); !reason.empty()) {
            skip(reason);
            continue;
        }
        for (const auto& entry : manifest.regions) {
            auto found = impl_->regions.find(entry.name);
            if (found != impl_->regions.end() && found->second.size != entry.size)
                throw Error("region '" + entry.name + "' has " + std::to_string(entry.size) + " bytes in "
                    + it->dir.string() + " but " + std::to_string(found->second.size)
                    + " bytes are registered");
        }
        impl_->ensureStaging(io::roundUp(manifest.totalBytes, io::kDirectAlignment));
        // The whole file goes into the staging pool and is verified there (reading runs ahead of
        // checking); only a checkpoint that verified reaches the registered regions, so a failed restore
        // leaves them exactly as they were.
        std::string reason = readAndVerify(it->dir, manifest, impl_->staging, impl_->options.directIo);
        if (!reason.empty()) {
            skip(reason);
            continue;
        }
        std::vector<Piece> hostCopies;
        for (const auto& entry : manifest.regions) {
            auto found = impl_->regions.find(entry.name);
            if (found != impl_->regions.end() && found->second.device < 0 && entry.size > 0)
                hostCopies.push_back({ static_cast<std::byte*>(found->second.data),
                    impl_->staging + entry.offset, entry.size });
        }
        // The copy is the one step that cannot overlap the read: it runs on every pool thread and on this
        // one, after this thread has started the device copies.
        TaskGroup copies(impl_->pool);
        auto tasks = makeCopyTasks(hostCopies, impl_->pool.size() + 1);
        std::vector<Piece> own;
        if (tasks.size() > 1) {
            own = std::move(tasks.back());
            tasks.pop_back();
        }
        for (auto& task : tasks)
            copies.post([task = std::move(task)] { copyPieces(task); });
        for (const auto& entry : manifest.regions) {
            auto found = impl_->regions.find(entry.name);
            if (found == impl_->regions.end()) {
                result.unclaimedRegions.push_back(entry.name);
                continue;
            }
            const auto& spec = found->second;
            if (spec.device >= 0)
                impl_->backend->restoreToDevice(
                    { impl_->staging + entry.offset, spec.data, entry.size, spec.device, spec.stream });
        }

        copyPieces(own);
        copies.wait();

        for (const auto& entry : manifest.blobs) {
            const std::byte* from = impl_->staging + entry.offset;
            result.blobs[entry.name].assign(from, from + entry.size);
        }
        describeRestored(result, manifest, it->dir);
        result.manifest = std::move(manifest.document);
        result.nodeLocal = it->local;
        impl_->epoch = result.epoch;
        // Newer than anything in the chain directory (its drain did not finish): drained now, so that
        // this node's failure cannot take it away from the chain.
        if (it->local && (!newestShared || it->iteration > *newestShared))
            impl_->drainer->submit(it->dir, it->iteration, false);
        return result;
    }
    return result;
}

CheckpointStats Checkpointer::lastCheckpoint() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->stats;
}

Counters Checkpointer::counters() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->counters;
}

std::string Checkpointer::lastError() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->lastError;
}

const Options& Checkpointer::options() const
{
    return impl_->options;
}

bool Checkpointer::deviceAvailable() const
{
    return impl_->backend->usable();
}

DrainStatus Checkpointer::drainStatus() const
{
    return impl_->drainer ? impl_->drainer->status() : DrainStatus {};
}

bool Checkpointer::waitDurable()
{
    const bool committed = wait();
    if (!impl_->drainer)
        return committed;
    const DrainStatus status = impl_->drainer->status();
    return !status.pendingIteration || impl_->drainer->waitFor(*status.pendingIteration);
}

} // namespace baton::ckpt
