// The inside of a Checkpointer, shared by the files of its phases: snapshot.cpp (staging pool and the
// copy of the registered state), persist.cpp (writing, committing and draining it), restore.cpp, and
// checkpointer.cpp (construction and the public calls).
#pragma once

#include "common/unique_fd.hpp"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/manifest.hpp"
#include "commit.hpp"
#include "device_backend.hpp"
#include "drain.hpp"
#include "thread_pool.hpp"

namespace baton::ckpt {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

// Where the checkpoint in flight stands; at most one is. Every change happens under Impl::mutex and is
// announced on Impl::changed, the one guard of the phase.
enum class Phase {
    Idle, // none in flight
    HostCopy, // copy threads still read host regions: beforeUpdate() waits
    DeviceCopy, // host copies done, device copies may still read device regions: registration waits
    Persist, // the snapshot is complete in the staging pool: written, committed, drained in the background
    Closed, // the Checkpointer is being destroyed: the persist thread ends
};

struct RegionSpec {
    void* data = nullptr;
    std::size_t size = 0;
    int device = -1;
    void* stream = nullptr;
    RegionLayout layout;
};

const char* layoutName(RegionLayout::Kind kind);

struct Piece {
    std::byte* to;
    const std::byte* from;
    std::size_t size;
};

// Splits copies into one task per thread of about equal size (measured fastest: each thread streams one
// long range); small regions share a task.
std::vector<std::vector<Piece>> makeCopyTasks(const std::vector<Piece>& copies, unsigned threads);
void copyPieces(const std::vector<Piece>& pieces);

// A checkpoint from its request to its commit: what the snapshot placed where in the staging pool.
struct InFlightCheckpoint {
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
    ~StagingReserve();

    // Starts allocating `bytes` unless a pool that large is ready or one is being allocated.
    void start(DeviceBackend& backend, std::size_t bytes);
    // Waits for an allocation under way and hands over its pool (null, 0 when there is none).
    std::pair<std::byte*, std::size_t> take();

private:
    std::mutex mutex_;
    TaskGroup allocation_;
    DeviceBackend* backend_ = nullptr;
    std::byte* pool_ = nullptr;
    std::size_t capacity_ = 0;
    bool allocating_ = false;
};

struct Checkpointer::Impl {
    explicit Impl(Options opts);

    void log(const std::string& message) const;
    int rank() const { return distributed ? coordinator->rank() : 0; }
    int worldSize() const { return distributed ? coordinator->size() : 1; }
    // Where this process commits checkpoints: the node-local directory with two levels (with several
    // ranks, this rank's directory inside it), else the chain.
    const std::filesystem::path& commitDir() const { return drainer ? localLevel : options.chainDir; }
    void startTwoLevel();

    // The phase (caller holds the mutex). Nothing waits for a snapshot to begin, so entering HostCopy
    // wakes no one: a request makes no thread runnable but the copy threads, which share the training
    // thread's cores.
    void enter(Phase next)
    {
        phase = next;
        if (next != Phase::HostCopy)
            changed.notify_all();
    }
    bool inFlight() const { return phase != Phase::Idle && phase != Phase::Closed; }
    void waitSnapshotLocked(std::unique_lock<std::mutex>& lock)
    {
        changed.wait(lock, [this] { return phase != Phase::HostCopy && phase != Phase::DeviceCopy; });
    }

    // Snapshot (snapshot.cpp).
    void ensureStaging(std::size_t bytes);
    void prepareStagingLocked();
    std::size_t stagingBytesNeeded() const;
    // The part of a region this rank writes: [from, from + length) of its memory, at `at` of an array of
    // globalSize bytes.
    struct Part {
        std::uint64_t from = 0, length = 0, at = 0, globalSize = 0;
    };
    Part partOf(const RegionSpec& spec) const;
    void startLocked(std::uint64_t iteration, CheckpointFlags flags);
    std::vector<std::uint64_t> placeEntries(InFlightCheckpoint& checkpoint) const;
    void stageCopies(const InFlightCheckpoint& checkpoint, const std::vector<std::uint64_t>& sourceOffsets,
        std::vector<Piece>& hostCopies, std::vector<DeviceCopy>& deviceCopies);

    // Persist and commit (persist.cpp).
    void persistLoop();
    void persist(InFlightCheckpoint& checkpoint);
    double finishSnapshot(const InFlightCheckpoint& checkpoint);
    void writeData(InFlightCheckpoint& checkpoint, const std::filesystem::path& file);
    nlohmann::json manifestDocument(
        const InFlightCheckpoint& checkpoint, double snapshotSeconds, Clock::time_point persistStart) const;
    void commit(InFlightCheckpoint& checkpoint, double snapshotSeconds, Clock::time_point persistStart);
    void commitSharded(InFlightCheckpoint& checkpoint, double snapshotSeconds, Clock::time_point persistStart,
        std::string error);
    nlohmann::json shardDescription(const InFlightCheckpoint& checkpoint, const std::string& error) const;
    void afterCommit(const InFlightCheckpoint& checkpoint, std::string& error);
    void recordOutcome(const std::string& error, double persistSeconds);

    // Restore (restore.cpp).
    struct Source;
    struct Verdict;
    struct Candidate;
    void waitForHandoverOnce(RestoreResult& result);
    RestoreResult restore(RestoreResult result);
    std::vector<Source> restoreSources(std::optional<std::uint64_t>& newestShared) const;
    std::vector<Source> agreedSources(std::optional<std::uint64_t>& newestShared) const;
    Verdict readCandidate(const Source& source, Candidate& candidate) const;
    Verdict planPerRankRegion(Candidate& candidate, const std::string& name, const RegionSpec& spec,
        const std::vector<const ManifestEntry*>& entries) const;
    Verdict planSharedRegion(Candidate& candidate, const std::string& name, const RegionSpec& spec,
        const std::vector<const ManifestEntry*>& entries) const;
    Verdict prepareCandidate(const Source& source, Candidate& candidate);
    std::string agreedVerdict(const Verdict& own) const;
    void applyCandidate(const Candidate& candidate, RestoreResult& result);

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
    bool scheduled = false; // scheduleCheckpoint(): the next afterUpdate() starts one

    // The checkpoint in flight.
    Phase phase = Phase::Idle;
    std::size_t hostCopiesLeft = 0; // copy tasks still running in Phase::HostCopy
    Clock::time_point snapshotStartedAt;
    Clock::time_point snapshotDoneAt;
    std::vector<DeviceCopy> streamsToOrder; // for the next beforeUpdate()
    std::optional<InFlightCheckpoint> queued; // handed to the persist thread

    CheckpointStats stats;
    Counters counters;
    std::string lastError;
    bool lastCommitted = true;
    bool handoverChecked = false; // restore() waits for a handover only the first time
    DirectoryCommitter committer { [this](const std::string& message) { log(message); } }; // of commitDir()
    std::unique_ptr<Drainer> drainer; // two levels: copies committed checkpoints to the chain directory
    std::string nodeName; // recorded in node-local manifests
    // Two levels: options.localDir, or its rank-R with several ranks, kept open from the trusted walk; its
    // path names the descriptor (/proc/self/fd/N), so that no rename on the way can redirect what follows.
    os::UniqueFd localLevelFd;
    std::filesystem::path localLevel;
    std::filesystem::path localLevelName; // the path it was opened by, for what the user reads
    // `path`, with the node-local level's descriptor path put back as the name it was opened by.
    std::filesystem::path shown(const std::filesystem::path& path) const
    {
        const auto relative = path.lexically_relative(localLevel);
        if (localLevel.empty() || relative.empty() || *relative.begin() == "..")
            return path;
        return localLevelName / relative;
    }

    std::thread persister;
};

} // namespace baton::ckpt
