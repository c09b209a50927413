// The two-phase checkpointer: snapshot the registered state into a staging pool while training goes
// on, persist it in the background, commit it atomically, restore the newest verified checkpoint.
//
// A training loop uses it like this:
//
//     Checkpointer ckpt(Options::fromEnvironment());
//     ckpt.registerRegion("weights", weights, weightBytes);
//     auto restored = ckpt.restore();                 // continue the chain, if there is one
//     for (uint64_t it = restored.restored ? restored.iteration + 1 : 0;; ++it) {
//         forwardBackward();                          // reads the weights: may overlap a snapshot
//         ckpt.beforeUpdate();                        // waits only while a snapshot still reads them
//         optimizerStep();
//         ckpt.afterUpdate(it);                       // state of iteration `it` is consistent
//         if (it % k == 0) ckpt.requestCheckpoint(it);
//     }
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/ckpt/error.hpp"
#include "baton/ckpt/options.hpp"

namespace baton::ckpt {

// What a checkpoint means for the chain; written to its manifest as `final` and `training_done`.
struct CheckpointFlags {
    bool final = false; // the process exits after it (deadline, SIGTERM, requested exit, finish)
    bool trainingDone = false; // the application declared the training complete
};

// Measured figures of one checkpoint (the policy's inputs).
struct CheckpointStats {
    std::uint64_t iteration = 0;
    std::uint64_t bytes = 0; // data bytes written
    double snapshotSeconds = 0; // request until the staging copy was complete
    double persistSeconds = 0; // snapshot complete until commit (or failure)
    double stallSeconds = 0; // time beforeUpdate() blocked waiting for this snapshot
    double stagingSeconds = 0; // of the request: getting a staging pool large enough (0 when it had one)
    bool finished = false; // persist has ended (committed or failed)
    bool committed = false;
    std::string error; // why it failed, when finished && !committed
    bool final = false; // as requested (CheckpointFlags)
    bool trainingDone = false;
};

struct Counters {
    std::uint64_t requested = 0; // checkpoints started
    std::uint64_t committed = 0;
    std::uint64_t failed = 0;
    std::uint64_t droppedRequests = 0; // requests refused because a checkpoint was in flight
    std::uint64_t stagingAllocations = 0; // staging pools allocated by a request or restore itself,
                                          // not prepared ahead in the background
};

// Two-level storage (Options::localDir): how the drain of node-local checkpoints to the chain directory
// stands. All zero / empty with one level.
struct DrainStatus {
    bool twoLevel = false; // checkpoints commit node-locally first
    std::optional<std::uint64_t> sharedIteration; // newest checkpoint this process committed on the shared level
    std::optional<std::uint64_t> pendingIteration; // waiting for its drain or being drained
    std::uint64_t drained = 0; // checkpoints committed on the shared level by the drain
    std::uint64_t retries = 0; // failed attempts that were tried again (slow or failing shared storage)
    std::uint64_t failed = 0; // checkpoints whose drain was given up after its attempts
    std::uint64_t skipped = 0; // checkpoints never drained because a newer one replaced them
    double lastDrainSeconds = 0; // of the last drain that committed: node-local commit to shared commit
    std::string lastError; // of the last failed attempt
};

// A piece of an N-dimensional tensor that several ranks share (RegionLayout::Kind::Box): the tensor's
// global shape and element size, the box (offset and length per dimension) of it that this rank's shard
// covers, and which of the box's elements the registered memory holds, in row-major order: from element
// `first`, as many as the region's size holds (the whole box: first 0). A DTensor's local shard is its
// box; an FSDP flat shard is a run of elements of the whole tensor. Ranks that hold the same piece (the
// replicate dimension of a 2-D mesh, a Replicate() placement) write it once: each writes part `writer`
// of `writers` equal parts, or, with `written` false, leaves it to another holder. A shard that is a view
// into a padded buffer (DTensor's uneven Shard(d) for d > 0) gives its `strides` (in elements, the last
// 1): the region then spans the box's first to last element, the whole box is held (first 0), and
// writers split it along its first dimension.
struct TensorPiece {
    std::vector<std::uint64_t> shape;
    std::uint64_t elementSize = 1;
    std::vector<std::uint64_t> boxOffset, boxLength;
    std::uint64_t first = 0;
    std::uint32_t writers = 1, writer = 0;
    std::vector<std::uint64_t> strides; // empty: row-major
    bool written = true;
};

// How a region's bytes relate across the ranks of a job (Options::coordinator); one process ignores it.
struct RegionLayout {
    enum class Kind {
        PerRank, // each rank's own bytes, restored to the same rank of the same world size
        Replicated, // every rank holds the same bytes (data-parallel): each byte is written once, the
                    // writing split across the ranks; restores on any world size
        Sharded, // this rank holds [offset, offset + size) of one array of globalSize bytes, split along
                 // its first dimension (ZeRO-1 / FSDP flat shards); restores on any split of that array
        Box, // this rank holds `piece` of a tensor (sharded along any dimensions, replicated or not);
             // restores on any other split of the tensor, and into the replicated or sharded layouts
    };
    Kind kind = Kind::PerRank;
    std::uint64_t offset = 0; // Sharded only
    std::uint64_t globalSize = 0; // Sharded only
    TensorPiece piece; // Box only

    static RegionLayout perRank() { return {}; }
    static RegionLayout replicated() { return { Kind::Replicated, 0, 0, {} }; }
    static RegionLayout sharded(std::uint64_t offset, std::uint64_t globalSize)
    {
        return { Kind::Sharded, offset, globalSize, {} };
    }
    static RegionLayout box(TensorPiece piece) { return { Kind::Box, 0, 0, std::move(piece) }; }
};

// A newer checkpoint that restore skipped, and why.
struct Fallback {
    std::filesystem::path dir;
    std::string reason;
};

struct RestoreResult {
    bool restored = false; // false: the chain holds no usable checkpoint (a fresh start)
    std::uint64_t iteration = 0;
    std::uint64_t epoch = 0;
    std::filesystem::path dir;
    std::map<std::string, std::vector<std::byte>> blobs;
    nlohmann::json manifest; // the restored manifest, with sampler, tuning and extra fields
    std::vector<Fallback> fallbacks;
    std::vector<std::string> unclaimedRegions; // in the checkpoint but not registered: not restored
    // Always false: restore verifies a checkpoint completely in the staging pool before any byte of it
    // reaches a registered region, so a failed restore leaves them as they were. Kept for source
    // compatibility with callers that checked it.
    bool regionsOverwritten = false;
    // The restored manifest's writer and flags (unknown / false for manifests without them).
    std::optional<std::uint64_t> jobId;
    std::optional<std::uint64_t> chainSeq;
    bool final = false;
    bool trainingDone = false;
    // Restored from the node-local level (Options::localDir), not from the chain directory.
    bool nodeLocal = false;
    // Seconds restore() waited for the predecessor's final checkpoint (Options::handoverWaitSeconds),
    // and whether that wait ran out before one appeared (not when batond's end marker ended it early:
    // the predecessor's job ended, its node dead or its process gone, and no final checkpoint will come).
    double handoverWaitSeconds = 0;
    bool handoverTimedOut = false;
};

class Checkpointer {
public:
    explicit Checkpointer(Options options);
    ~Checkpointer(); // waits for an in-flight checkpoint to commit or fail
    Checkpointer(const Checkpointer&) = delete;
    Checkpointer& operator=(const Checkpointer&) = delete;

    // Registers (or re-registers, with a new address or size) a region of host memory. The memory must
    // stay valid until it is unregistered or the Checkpointer is destroyed.
    void registerRegion(const std::string& name, void* data, std::size_t size);
    // A region in CUDA device memory; `stream` (a cudaStream_t, null = default stream) is the stream the
    // application updates it on. Throws Error when no CUDA device is usable.
    void registerDeviceRegion(
        const std::string& name, void* devicePtr, std::size_t size, int device, void* stream = nullptr);
    void unregisterRegion(const std::string& name);
    // The layout of a registered region (default PerRank); applies to host and device regions alike.
    // Throws Error for an unknown region or a shard outside its array.
    void setRegionLayout(const std::string& name, RegionLayout layout);
    // Snapshot device regions into spare device memory (GPU-side, fastest) instead of straight into the
    // pinned host pool; the policy turns it on when the state fits in free device memory.
    void setDeviceSnapshot(bool onDevice);

    // Small serialized state (step counter, RNG state, ...). The bytes are copied now; the latest value
    // goes into every following checkpoint.
    void setBlob(const std::string& name, std::span<const std::byte> bytes);
    void setBlob(const std::string& name, std::string_view bytes);
    void removeBlob(const std::string& name);

    void setEpoch(std::uint64_t epoch);
    // A top-level field of every following manifest, e.g. "sampler" or "tuning". Fields the format
    // itself defines (iteration, regions, ...) are refused.
    void setManifestField(const std::string& key, nlohmann::json value);

    // Hook: the weights of `iteration` are consistent. Starts a checkpoint if scheduleCheckpoint() asked.
    // The first call after the registered regions changed also prepares the staging pool (below).
    void afterUpdate(std::uint64_t iteration);
    // Allocates, on a thread of its own, a staging pool large enough for the registered regions and
    // blobs, which the next checkpoint takes over (waiting for it if it is not done yet). Pinning or
    // populating gigabytes takes about a second: the first checkpoint would stall training for it.
    void prepareStaging();
    // Hook: returns once no snapshot still reads the registered memory (for device regions: makes their
    // streams wait instead of blocking the host).
    void beforeUpdate();

    // Non-blocking: snapshots the registered state as of `iteration` (the caller says it is consistent)
    // and persists it in the background. Returns false, and counts the request as dropped, when a
    // checkpoint is already in flight. With several ranks it waits for the one in flight instead: every
    // rank must take part in the same checkpoints.
    bool requestCheckpoint(std::uint64_t iteration, CheckpointFlags flags = {});
    // Thread-safe: the next afterUpdate() starts a checkpoint (for signal handlers' flags and policies).
    void scheduleCheckpoint();
    // Waits for any in-flight checkpoint, checkpoints `iteration` and waits for it to commit.
    // Returns whether it committed; lastError() says why not.
    bool checkpointNow(std::uint64_t iteration, CheckpointFlags flags = {});
    // Waits until no checkpoint is in flight. Returns whether the last checkpoint committed.
    bool wait();
    bool inFlight() const;

    // Restores the newest committed checkpoint whose checksums all verify into the registered regions,
    // falling back to older ones; regions receive bytes only from a checkpoint that verified. A manifest
    // whose sizes do not match its data file is skipped before anything is allocated for it. Throws
    // FormatError for a newer format, Error when a checkpoint's region has a different size than the
    // registered one. With Options::handoverWaitSeconds > 0 and chainSeq n > 0, the first call first
    // waits (at most that long) for the predecessor's final checkpoint (waitForHandover), so that a successor
    // never resumes from a stale one.
    //
    // With several ranks it is collective: rank 0 lists the chain, every rank verifies what it needs of
    // each candidate (newest first) and all restore the newest one that verified for every rank, or all
    // fall back together. A checkpoint of another world size restores replicated and sharded regions
    // (blobs then come from rank 0); a per-rank region it cannot map throws Error on every rank.
    // Throws CoordinationError when a rank does not take part in time.
    RestoreResult restore();

    int rank() const; // 0 without a coordinator
    int worldSize() const; // 1 without a coordinator

    CheckpointStats lastCheckpoint() const;
    Counters counters() const;
    std::string lastError() const; // empty when the last checkpoint committed
    const Options& options() const;
    bool deviceAvailable() const; // a CUDA device is usable (the staging pool is pinned)
    DrainStatus drainStatus() const;
    // Two levels: waits until the newest node-local checkpoint has committed on the shared level (or its
    // drain gave up); returns whether it did. One level: wait().
    bool waitDurable();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace baton::ckpt
