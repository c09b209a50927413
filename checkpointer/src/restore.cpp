// The restore phase: one path for one process and for several ranks (a single process is the world of
// one, whose collectives are its own answers). The candidates are walked newest first; each is planned
// and verified in the staging pool, and only one that verified for every rank reaches the registered
// regions.
#include "checkpointer_impl.hpp"

#include <algorithm>
#include <cstdio>

#include "io.hpp"
#include "tensor_box.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;

// A checkpoint restore() may take: the chain directory's, and with two levels the node-local ones.
struct Checkpointer::Impl::Source : CheckpointInfo {
    bool local = false;
};

// Why a candidate cannot be restored (empty: it can); `fatal` when no older checkpoint can help either
// (a newer format, a layout this world cannot map, sizes that differ from the registered ones).
struct Checkpointer::Impl::Verdict {
    std::string reason;
    bool fatal = false;
    bool format = false; // fatal because of a newer format: FormatError
};

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
    // A single process's checkpoint (version 1) is read whole: the staging offset of its data file.
    std::map<std::string, std::uint64_t> fileAt;
    // A multi-rank one, entry by entry (a chunked one in part): where each read of this rank goes.
    struct EntryPart {
        std::uint64_t at = 0; // staging offset of byte `begin`
        std::uint64_t begin = 0, end = 0;
    };
    std::map<const ManifestEntry*, EntryPart> entryAt;
    std::uint64_t stagingBytes = 0;

    // The staging offset of `entry`'s first byte, the whole entry read by this rank.
    std::uint64_t need(const ManifestEntry& entry) { return need(entry, 0, entry.size); }

    // The staging offset of `entry`'s first byte, bytes [begin, end) of it read by this rank (each entry
    // is needed once: it belongs to one region or blob).
    std::uint64_t need(const ManifestEntry& entry, std::uint64_t begin, std::uint64_t end)
    {
        if (manifest.formatVersion < kShardedFormatVersion)
            return need(entry.file) + entry.offset;
        auto [it, added] = entryAt.try_emplace(&entry);
        if (added) {
            // In its own pages, at its offset within a page, as a direct read of whole pages puts it.
            const std::uint64_t lead = (entry.offset + begin) % io::kDirectAlignment;
            it->second = { stagingBytes + lead, begin, end };
            stagingBytes = io::roundUp(stagingBytes + lead + (end - begin), io::kDirectAlignment);
        }
        return it->second.at - it->second.begin;
    }

    std::uint64_t need(const std::string& file)
    {
        auto [it, added] = fileAt.try_emplace(file, 0);
        if (added) {
            it->second = stagingBytes;
            for (const auto& f : manifest.files) {
                if (f.name == file)
                    stagingBytes = io::roundUp(stagingBytes + f.size, io::kDirectAlignment);
            }
        }
        return it->second;
    }
};

namespace {

// What a restore reports about the checkpoint it took, from that checkpoint's manifest.
void describeRestored(RestoreResult& result, const Manifest& manifest, const fs::path& dir)
{
    result.restored = true;
    result.iteration = manifest.iteration;
    result.epoch = manifest.epoch;
    result.dir = dir;
    result.jobId = manifest.jobId;
    result.chainSeq = manifest.chainSeq;
    result.final = manifest.final;
    result.trainingDone = manifest.trainingDone;
}

} // namespace

// A successor may start while its predecessor still writes the handover checkpoint: restoring the
// newest checkpoint before that one commits would resume from stale state.
void Checkpointer::Impl::waitForHandoverOnce(RestoreResult& result)
{
    if (std::exchange(handoverChecked, true) || options.handoverWaitSeconds <= 0 || !options.chainSeq
        || *options.chainSeq == 0)
        return;
    const std::uint64_t previous = *options.chainSeq - 1;
    log("handover: waiting up to " + std::to_string(static_cast<long long>(options.handoverWaitSeconds))
        + " s for a final checkpoint of seq " + std::to_string(previous) + " or later");
    const HandoverWaitResult wait = waitForHandover(options.chainDir, previous, options.handoverWaitSeconds);
    result.handoverWaitSeconds = wait.seconds;
    result.handoverTimedOut = !wait.found && wait.predecessorEnded.empty();
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.1f", wait.seconds);
    if (wait.found)
        log("handover: " + wait.checkpoint.filename().string() + " is final, found after " + waited + " s");
    else if (!wait.predecessorEnded.empty())
        log("handover: " + wait.predecessorEnded + " without a final checkpoint (batond, after " + waited
            + " s), restoring the newest verified checkpoint");
    else
        log(std::string("handover: no final checkpoint of seq ") + std::to_string(previous) + " after "
            + waited + " s, restoring the newest verified checkpoint");
}

// Newest first; a node-local copy before the chain directory's copy of the same iteration (it is read at
// local speed). A listing error of the node-local directory leaves its copies out, with a warning. With
// several ranks restore reads the chain directory only.
std::vector<Checkpointer::Impl::Source> Checkpointer::Impl::restoreSources(
    std::optional<std::uint64_t>& newestShared) const
{
    std::vector<Source> all;
    for (const auto& info : listCheckpoints(options.chainDir)) {
        if (info.committed)
            newestShared = std::max(newestShared.value_or(0), info.iteration);
        all.push_back({ info, false });
    }
    if (drainer && !distributed) {
        try {
            for (const auto& info : listCheckpoints(localLevel))
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

// Rank 0's list of the chain is the one every rank walks.
std::vector<Checkpointer::Impl::Source> Checkpointer::Impl::agreedSources(
    std::optional<std::uint64_t>& newestShared) const
{
    if (!distributed)
        return restoreSources(newestShared);
    nlohmann::json listing = nlohmann::json::object();
    if (rank() == 0) {
        try {
            auto list = nlohmann::json::array();
            for (const auto& source : restoreSources(newestShared))
                list.push_back({ { "name", source.dir.filename().string() }, { "committed", source.committed },
                    { "stat_error", source.statError } });
            listing["checkpoints"] = std::move(list);
        } catch (const std::exception& e) {
            listing["error"] = e.what();
        }
    }
    listing = nlohmann::json::parse(coordinator->broadcast("restore-list", listing.dump(), 0));
    if (listing.contains("error"))
        throw Error("rank 0 could not list the chain: " + listing["error"].get<std::string>());
    std::vector<Source> sources;
    for (const auto& item : listing["checkpoints"]) {
        const std::string name = item["name"].get<std::string>();
        Source source;
        source.dir = options.chainDir / name;
        source.iteration = parseCheckpointDirName(name).value_or(0);
        source.committed = item["committed"].get<bool>();
        source.statError = item["stat_error"].get<int>();
        sources.push_back(std::move(source));
    }
    return sources;
}

// The manifest of `source`, and whether this process may take it at all.
Checkpointer::Impl::Verdict Checkpointer::Impl::readCandidate(const Source& source, Candidate& candidate) const
{
    candidate.dir = source.dir;
    Manifest& manifest = candidate.manifest;
    try {
        manifest = parseManifest(io::readSmallFile(source.dir / kManifestName));
    } catch (const FormatError& e) {
        return { e.what(), true, true };
    } catch (const Error& e) {
        return { e.what() };
    }
    if (manifest.iteration
        != parseCheckpointDirName(source.dir.filename().string()).value_or(manifest.iteration + 1))
        return { "manifest iteration " + std::to_string(manifest.iteration) + " does not match the directory" };
    if (source.local) {
        // A node-local copy is only ever this node's: elsewhere the directory may be another disk that
        // happens to have the same path, or a shared one that several nodes write to.
        const auto node = manifest.document.find("node");
        const std::string writer
            = node != manifest.document.end() && node->is_string() ? node->get<std::string>() : "";
        if (writer != nodeName)
            return { "a node-local copy written on node '" + writer + "', not on this node ('" + nodeName + "')" };
    }
    // The staging pool is sized by the manifest only after the manifest's layout matched the data files
    // on disk: an absurd total_bytes never turns into an allocation.
    return { checkLayout(source.dir, manifest) };
}

// A region saved as each rank's own bytes by several ranks: only the same rank of the same world takes it.
Checkpointer::Impl::Verdict Checkpointer::Impl::planPerRankRegion(Candidate& candidate, const std::string& name,
    const RegionSpec& spec, const std::vector<const ManifestEntry*>& entries) const
{
    const std::string& dir = candidate.dir.string();
    const int saved = candidate.manifest.worldSize;
    if (spec.layout.kind != RegionLayout::Kind::PerRank)
        return { "region '" + name + "' holds each rank's own bytes in " + dir + " but is registered "
                + layoutName(spec.layout.kind) + ": that layout cannot be mapped",
            true };
    if (saved != worldSize())
        return { "region '" + name + "' holds each rank's own bytes, saved by " + std::to_string(saved)
                + " ranks in " + dir + ": it cannot be restored on " + std::to_string(worldSize())
                + " ranks (register data-parallel state replicated, or sharded along its first dimension)",
            true };
    const ManifestEntry* own = nullptr;
    for (const auto* entry : entries) {
        if (entry->rank == rank())
            own = entry;
    }
    if (own == nullptr)
        return { "region '" + name + "' has no part of rank " + std::to_string(rank()) };
    if (own->size != spec.size)
        return { "region '" + name + "' has " + std::to_string(own->size) + " bytes in " + dir + " but "
                + std::to_string(spec.size) + " bytes are registered",
            true };
    candidate.copies.push_back({ name, candidate.need(*own), own->size, 0 });
    return {};
}

namespace {

// The piece a registered region holds, in the geometry of tensor pieces (tensor_box.hpp).
PieceGeometry registeredPiece(const RegionSpec& spec)
{
    const RegionLayout& layout = spec.layout;
    switch (layout.kind) {
    case RegionLayout::Kind::Box:
        return registeredPiece(layout.piece, spec.size);
    case RegionLayout::Kind::Sharded:
        return flatPiece(layout.globalSize, layout.offset, spec.size);
    case RegionLayout::Kind::Replicated:
    case RegionLayout::Kind::PerRank:
        break;
    }
    return flatPiece(spec.size, 0, spec.size);
}

std::string tensorText(const PieceGeometry& piece)
{
    return piece.tensorShape.empty() && piece.shape.size() == 1
        ? std::to_string(piece.shape[0]) + " bytes"
        : "shape " + shapeText(piece.tensorShape) + " of " + std::to_string(piece.elementSize) + "-byte elements";
}

} // namespace

// One tensor or array in pieces: this rank takes the bytes of its own piece from every saved piece that
// holds some of them. Flat arrays (replicated, sharded) and tensor pieces (box) meet in the tensor's
// byte geometry, where their row-major orders agree.
Checkpointer::Impl::Verdict Checkpointer::Impl::planSharedRegion(Candidate& candidate, const std::string& name,
    const RegionSpec& spec, const std::vector<const ManifestEntry*>& entries) const
{
    PieceGeometry target = registeredPiece(spec);
    std::vector<PieceGeometry> saved;
    for (const auto* entry : entries)
        saved.push_back(savedPiece(*entry));
    const bool targetIsTensor = spec.layout.kind == RegionLayout::Kind::Box;
    const bool savedIsTensor = entries.front()->layout == kLayoutBox;
    const std::uint64_t targetBytes = volume(target.shape), savedBytes = volume(saved.front().shape);
    const std::string dir = candidate.dir.string();
    if (targetIsTensor && savedIsTensor
        && (target.tensorShape != saved.front().tensorShape || target.elementSize != saved.front().elementSize))
        return { "tensor '" + name + "' has " + tensorText(saved.front()) + " in " + dir + ", this one "
                + tensorText(target),
            true };
    if (targetBytes != savedBytes)
        return { "region '" + name + "' has " + std::to_string(savedBytes) + " bytes in " + dir + " but "
                + std::to_string(targetBytes) + " bytes are registered"
                + (spec.layout.kind == RegionLayout::Kind::Sharded ? " (the whole sharded array)" : ""),
            true };
    if (targetIsTensor && !savedIsTensor) {
        for (auto& piece : saved)
            piece = inShapeOf(piece, target);
    } else if (savedIsTensor && !targetIsTensor) {
        target = inShapeOf(target, saved.front());
    }
    const auto targetBoxes = contiguousBoxes(target);
    for (std::size_t i = 0; i < entries.size(); ++i) {
        if (entries[i]->size == 0)
            continue;
        const auto copies = overlapCopies(contiguousBoxes(saved[i]), targetBoxes);
        if (copies.empty())
            continue;
        // The chunks of the entry that hold the bytes this rank takes (a piece without chunks: all of it).
        const ManifestEntry& entry = *entries[i];
        std::uint64_t begin = 0, end = entry.size;
        if (entry.chunkBytes > 0) {
            begin = entry.size;
            end = 0;
            for (const auto& copy : copies) {
                begin = std::min(begin, copy.from);
                end = std::max(end, copy.from + copy.size);
            }
            begin = begin / entry.chunkBytes * entry.chunkBytes;
            end = std::min(entry.size, (end + entry.chunkBytes - 1) / entry.chunkBytes * entry.chunkBytes);
        }
        const std::uint64_t at = candidate.need(entry, begin, end);
        for (const auto& copy : copies)
            candidate.copies.push_back({ name, at + copy.from, copy.size, copy.to });
    }
    return {};
}

// Plans and verifies this rank's part of `source`.
Checkpointer::Impl::Verdict Checkpointer::Impl::prepareCandidate(const Source& source, Candidate& candidate)
{
    if (Verdict verdict = readCandidate(source, candidate); !verdict.reason.empty())
        return verdict;
    const Manifest& manifest = candidate.manifest;
    // A single process's checkpoint is read and verified whole, also where no registered region needs
    // some of its bytes.
    if (manifest.formatVersion < kShardedFormatVersion) {
        for (const auto& f : manifest.files)
            candidate.need(f.name);
    }
    std::map<std::string, std::vector<const ManifestEntry*>> byName;
    for (const auto& entry : manifest.regions)
        byName[entry.name].push_back(&entry);
    for (const auto& [name, entries] : byName) {
        auto found = regions.find(name);
        if (found == regions.end()) {
            candidate.unclaimed.push_back(name);
            continue;
        }
        // A world of one wrote every region whole: any layout can take it.
        const bool perRankSaved = entries.front()->layout == kLayoutRank && manifest.worldSize > 1;
        Verdict verdict = perRankSaved ? planPerRankRegion(candidate, name, found->second, entries)
                                       : planSharedRegion(candidate, name, found->second, entries);
        if (!verdict.reason.empty())
            return verdict;
    }
    // Blobs are each rank's own; on another world size every rank takes rank 0's (data-parallel ranks
    // hold the same step counters and sampler state).
    const int blobRank = manifest.worldSize == worldSize() ? rank() : 0;
    for (const auto& entry : manifest.blobs) {
        if (entry.rank == blobRank)
            candidate.blobs.push_back({ entry.name, candidate.need(entry), entry.size, 0 });
    }
    // What this rank needs goes into the staging pool and is verified there: a single process's data file
    // whole (reading runs ahead of checking), a rank's entries one by one; only a checkpoint that
    // verified reaches the registered regions.
    ensureStaging(std::max<std::uint64_t>(candidate.stagingBytes, io::kDirectAlignment));
    for (const auto& [file, at] : candidate.fileAt) {
        if (std::string reason = readAndVerifyFile(candidate.dir, manifest, file, staging + at, options.directIo);
            !reason.empty())
            return { reason };
    }
    std::vector<EntryRead> reads;
    for (const auto& [entry, part] : candidate.entryAt)
        reads.push_back({ entry, staging + part.at, part.begin, part.end });
    if (std::string reason = readAndVerifyEntries(candidate.dir, reads, options.directIo, pool); !reason.empty())
        return { reason };
    return {};
}

// Every rank's verdict on the same candidate, so that all restore it or skip it together; throws when
// one is fatal. Returns why it is skipped (empty: every rank can restore it).
std::string Checkpointer::Impl::agreedVerdict(const Verdict& own) const
{
    if (!distributed) {
        if (own.format)
            throw FormatError(own.reason);
        if (own.fatal)
            throw Error(own.reason);
        return own.reason;
    }
    nlohmann::json verdict = { { "reason", own.reason }, { "fatal", own.fatal }, { "format", own.format } };
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
    return why;
}

// The copy is the one step that cannot overlap the read: it runs on every pool thread and on this one,
// after this thread has started the device copies.
void Checkpointer::Impl::applyCandidate(const Candidate& candidate, RestoreResult& result)
{
    std::vector<Piece> hostCopies;
    for (const auto& copy : candidate.copies) {
        const RegionSpec& spec = regions.at(copy.region);
        if (copy.size > 0 && spec.device < 0)
            hostCopies.push_back({ static_cast<std::byte*>(spec.data) + copy.to, staging + copy.from, copy.size });
    }
    TaskGroup copies(pool);
    auto tasks = makeCopyTasks(hostCopies, pool.size() + 1);
    std::vector<Piece> own;
    if (tasks.size() > 1) {
        own = std::move(tasks.back());
        tasks.pop_back();
    }
    for (auto& task : tasks)
        copies.post([task = std::move(task)] { copyPieces(task); });
    for (const auto& copy : candidate.copies) {
        const RegionSpec& spec = regions.at(copy.region);
        if (copy.size > 0 && spec.device >= 0)
            backend->restoreToDevice({ staging + copy.from, static_cast<std::byte*>(spec.data) + copy.to,
                copy.size, spec.device, spec.stream });
    }
    copyPieces(own);
    copies.wait();
    for (const auto& blob : candidate.blobs)
        result.blobs[blob.region].assign(staging + blob.from, staging + blob.from + blob.size);
    describeRestored(result, candidate.manifest, shown(candidate.dir));
    result.manifest = candidate.manifest.document;
    result.unclaimedRegions = candidate.unclaimed;
    epoch = result.epoch;
}

// Caller holds the mutex, with no checkpoint in flight.
RestoreResult Checkpointer::Impl::restore(RestoreResult result)
{
    std::optional<std::uint64_t> newestShared;
    for (const Source& source : agreedSources(newestShared)) {
        auto skip = [&](const std::string& reason) {
            log("skipping " + shown(source.dir).string() + ": " + reason);
            result.fallbacks.push_back({ shown(source.dir), reason });
        };
        if (source.statError != 0) {
            skip(io::IoError(source.statError, "cannot examine " + (source.dir / kManifestName).string()).what());
            continue;
        }
        if (!source.committed) {
            skip("not committed (no manifest.json): an interrupted checkpoint");
            continue;
        }
        Candidate candidate;
        Verdict verdict;
        if (!distributed) {
            verdict = prepareCandidate(source, candidate);
        } else {
            try { // every rank must answer the collective below
                verdict = prepareCandidate(source, candidate);
            } catch (const std::exception& e) {
                verdict = { e.what(), true, false };
            }
        }
        if (std::string why = agreedVerdict(verdict); !why.empty()) {
            skip(why);
            continue;
        }
        applyCandidate(candidate, result);
        result.nodeLocal = source.local;
        // Newer than anything in the chain directory (its drain did not finish): drained now, so that
        // this node's failure cannot take it away from the chain.
        if (source.local && (!newestShared || source.iteration > *newestShared))
            drainer->submit(source.dir, source.iteration, false);
        return result;
    }
    return result;
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
    return impl_->restore(std::move(result));
}

} // namespace baton::ckpt
