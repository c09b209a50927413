// The persist phase: the persist thread writes the staged checkpoint and commits it through the one
// manifest-and-rename tail (DirectoryCommitter::commitWithManifest), alone or, with several ranks,
// collectively; retention and the drain to the chain directory follow.
#include "checkpointer_impl.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "baton_version.h"
#include "common/baton_contract.hpp"
#include "io.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;

namespace {

double unixNow()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json optionalNumber(const std::optional<std::uint64_t>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

} // namespace

void Checkpointer::Impl::persistLoop()
{
    for (;;) {
        InFlightCheckpoint checkpoint;
        {
            std::unique_lock lock(mutex);
            // Taken over once the host copies are done (they wake this thread), not at the request.
            changed.wait(lock, [this] { return phase == Phase::Closed || (queued && phase != Phase::HostCopy); });
            if (!queued)
                return;
            checkpoint = std::move(*queued);
            queued.reset();
        }
        persist(checkpoint);
    }
}

// Waits for the copies of the snapshot (HostCopy, DeviceCopy -> Persist); returns its seconds.
double Checkpointer::Impl::finishSnapshot(const InFlightCheckpoint& checkpoint)
{
    {
        std::unique_lock lock(mutex);
        changed.wait(lock, [this] { return phase != Phase::HostCopy; });
    }
    if (checkpoint.hasDeviceCopies)
        backend->finishSnapshot();
    std::lock_guard lock(mutex);
    if (checkpoint.hasDeviceCopies) {
        snapshotDoneAt = Clock::now();
        enter(Phase::Persist);
    }
    const double snapshotSeconds = seconds(snapshotDoneAt - checkpoint.requestedAt);
    stats.snapshotSeconds = snapshotSeconds;
    return snapshotSeconds;
}

void Checkpointer::Impl::persist(InFlightCheckpoint& checkpoint)
{
    std::string error;
    double snapshotSeconds = 0;
    Clock::time_point persistStart = Clock::now();
    try {
        snapshotSeconds = finishSnapshot(checkpoint);
        persistStart = Clock::now();
        if (!distributed || drainer)
            commit(checkpoint, snapshotSeconds, persistStart);
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (distributed && !drainer) {
        // Reached whatever happened above: the other ranks wait for this one's part in the commit.
        try {
            commitSharded(checkpoint, snapshotSeconds, persistStart, error);
            error.clear();
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    const double persistSeconds = seconds(Clock::now() - persistStart);

    if (error.empty()) {
        afterCommit(checkpoint, error);
        if (!error.empty())
            log("checkpoint of iteration " + std::to_string(checkpoint.iteration) + ": " + error);
    } else {
        std::error_code ec;
        // With several ranks the others may still write into the chain's temporary directory until
        // rank 0 gives up; a rank's node-local one is its own.
        if (rank() == 0 || drainer)
            fs::remove_all(checkpoint.temporary, ec);
        log("checkpoint of iteration " + std::to_string(checkpoint.iteration)
            + " failed, training continues and the previous checkpoint stays valid: " + error);
        // Two levels with several ranks: the others drain this iteration in a round this rank must join,
        // where its missing copy fails it for all.
        if (distributed && drainer)
            drainer->submit(commitDir() / checkpointDirName(checkpoint.iteration), checkpoint.iteration, false);
    }
    recordOutcome(error, persistSeconds);
}

// Persist -> Idle, with the checkpoint's outcome.
void Checkpointer::Impl::recordOutcome(const std::string& error, double persistSeconds)
{
    std::lock_guard lock(mutex);
    stats.persistSeconds = persistSeconds;
    stats.finished = true;
    stats.committed = error.empty();
    stats.error = error;
    lastError = error;
    lastCommitted = error.empty();
    ++(error.empty() ? counters.committed : counters.failed);
    enter(Phase::Idle);
}

// Writes the staged bytes of `checkpoint` to `file` and makes them durable; the entries' checksums are
// computed on the (otherwise idle) copy threads while the data goes to the device.
void Checkpointer::Impl::writeData(InFlightCheckpoint& checkpoint, const fs::path& file)
{
    // Declared before the task group: they outlive the tasks that use them.
    std::vector<ManifestEntry*> small;
    auto hash = [this](ManifestEntry& entry) {
        if (entry.chunkBytes == 0) {
            entry.checksum = checksum(staging + entry.offset, entry.size);
            return;
        }
        entry.chunkChecksums = chunkChecksums(staging + entry.offset, entry.size, entry.chunkBytes);
        entry.checksum = checksumOfChunks(entry.chunkChecksums);
    };
    TaskGroup hashing(pool);
    for (auto* list : { &checkpoint.regions, &checkpoint.blobs }) {
        for (auto& entry : *list) {
            if (entry.size >= (1 << 20))
                hashing.post([&hash, &entry] { hash(entry); });
            else
                small.push_back(&entry);
        }
    }
    hashing.post([&hash, &small] {
        for (auto* entry : small)
            hash(*entry);
    });
    io::writeFileDurably(file, staging, checkpoint.totalBytes, options.directIo, options.fileMode);
    hashing.wait();
}

nlohmann::json Checkpointer::Impl::manifestDocument(
    const InFlightCheckpoint& checkpoint, double snapshotSeconds, Clock::time_point persistStart) const
{
    nlohmann::json document = nlohmann::json::object();
    for (const auto& [key, value] : checkpoint.fields)
        document[key] = value;
    if (!document.contains("sampler"))
        document["sampler"] = nullptr;
    if (!document.contains("tuning"))
        document["tuning"] = nlohmann::json::object();
    document["format_version"] = kFormatVersion;
    document["iteration"] = checkpoint.iteration;
    document["epoch"] = checkpoint.epoch;
    document["total_bytes"] = checkpoint.totalBytes;
    document["regions"] = entriesToJson(checkpoint.regions);
    document["blobs"] = entriesToJson(checkpoint.blobs);
    document["files"]
        = nlohmann::json::array({ { { "name", kDataFileName }, { "size", checkpoint.totalBytes } } });
    document["library_version"] = BATON_VERSION;
    document["job_id"] = optionalNumber(options.jobId);
    document[contract::kManifestSeqKey] = optionalNumber(options.chainSeq);
    document["final"] = checkpoint.flags.final;
    document["training_done"] = checkpoint.flags.trainingDone;
    document["timings"] = { { "snapshot_seconds", snapshotSeconds },
        { "persist_seconds", seconds(Clock::now() - persistStart) } };
    document["created_unix"] = unixNow();
    if (drainer)
        document["node"] = nodeName;
    return document;
}

// Retention, and with two levels the drain: a final or training_done checkpoint is done only once its
// copy in the chain directory has committed, since only that copy counts for the successor.
void Checkpointer::Impl::afterCommit(const InFlightCheckpoint& checkpoint, std::string& error)
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
    const bool last = checkpoint.flags.final || checkpoint.flags.trainingDone;
    drainer->submit(commitDir() / checkpointDirName(checkpoint.iteration), checkpoint.iteration, last);
    if (last && !drainer->waitFor(checkpoint.iteration))
        error = "committed in the node-local directory, but its copy in the chain directory did not commit: "
            + drainer->status().lastError;
}

// Commits what this process wrote, alone, in commitDir(): a single process's checkpoint, or with two
// levels and several ranks this rank's shard. The shard's record is its description (and on rank 0 the
// checkpoint's fields), from which the drain's collective commit assembles the chain's manifest; it is no
// manifest, since only the chain's copy is a checkpoint.
void Checkpointer::Impl::commit(
    InFlightCheckpoint& checkpoint, double snapshotSeconds, Clock::time_point persistStart)
{
    std::error_code ec;
    fs::remove_all(checkpoint.temporary, ec);
    if (::mkdir(checkpoint.temporary.c_str(), static_cast<mode_t>(io::directoryMode(options.fileMode))) != 0)
        io::throwErrno("cannot create " + checkpoint.temporary.string());
    writeData(checkpoint, checkpoint.temporary / (distributed ? shardFileName(rank()) : std::string(kDataFileName)));
    std::string text;
    if (distributed) {
        nlohmann::json record = shardDescription(checkpoint, "");
        record["world_size"] = worldSize();
        if (rank() == 0)
            record["manifest"] = manifestDocument(checkpoint, snapshotSeconds, persistStart);
        text = record.dump();
    } else {
        text = renderManifest(manifestDocument(checkpoint, snapshotSeconds, persistStart));
    }
    // The commit point: the complete directory appears under its final name in one rename.
    committer.commitWithManifest(
        checkpoint.temporary, text, commitDir() / checkpointDirName(checkpoint.iteration), options.fileMode);
}

// What rank 0 needs to name this rank's shard in the manifest, or why there is none.
nlohmann::json Checkpointer::Impl::shardDescription(
    const InFlightCheckpoint& checkpoint, const std::string& error) const
{
    return { { "rank", rank() }, { "iteration", checkpoint.iteration }, { "file", shardFileName(rank()) },
        { "size", checkpoint.totalBytes }, { "regions", entriesToJson(checkpoint.regions, true) },
        { "blobs", entriesToJson(checkpoint.blobs, true) }, { "error", error } };
}

// Every rank writes its shard into the shared temporary directory in parallel and tells rank 0 what it
// wrote (or why it could not); rank 0 commits only when every shard is durable, with one manifest and
// one rename (the same tail as commit()), and tells every rank the outcome. Every rank takes part in
// both collectives whatever happened before, so that a failure on one rank fails the checkpoint on all
// instead of stalling them.
void Checkpointer::Impl::commitSharded(
    InFlightCheckpoint& checkpoint, double snapshotSeconds, Clock::time_point persistStart, std::string error)
{
    const int ownRank = rank();
    if (error.empty()) {
        try {
            // Whichever rank comes first creates the directory; its name is this checkpoint's alone.
            if (::mkdir(checkpoint.temporary.c_str(), static_cast<mode_t>(io::directoryMode(options.fileMode)))
                    != 0
                && errno != EEXIST)
                io::throwErrno("cannot create " + checkpoint.temporary.string());
            writeData(checkpoint, checkpoint.temporary / shardFileName(ownRank));
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    const auto shards = coordinator->allGather("shards", shardDescription(checkpoint, error).dump());

    std::string outcome; // empty: committed
    if (ownRank == 0) {
        try {
            const std::string text = shardedManifest(manifestDocument(checkpoint, snapshotSeconds, persistStart),
                shards, checkpoint.temporary, checkpoint.iteration);
            committer.commitWithManifest(checkpoint.temporary, text,
                options.chainDir / checkpointDirName(checkpoint.iteration), options.fileMode);
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

} // namespace baton::ckpt
