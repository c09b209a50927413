// A chain directory: listing, verifying and pruning the checkpoints inside it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "baton/ckpt/manifest.hpp"

namespace baton::ckpt {

// "ckpt-000000001200" for iteration 1200 (docs/contracts.md: zero-padded to 12 digits, up to 20).
std::string checkpointDirName(std::uint64_t iteration);
// The iteration a directory name stands for, if it is exactly the name checkpointDirName() gives it
// (the plugin reads chain directories with the same rule).
std::optional<std::uint64_t> parseCheckpointDirName(const std::string& name);

struct CheckpointInfo {
    std::filesystem::path dir;
    std::uint64_t iteration = 0;
    bool committed = false; // its manifest.json exists
    // errno of a failed stat of manifest.json other than ENOENT (EIO, ESTALE, EACCES, ...): whether it
    // is committed is unknown, so it is neither restored nor ever removed by retention.
    int statError = 0;
};

// Every ckpt-* directory of the chain, oldest iteration first.
std::vector<CheckpointInfo> listCheckpoints(const std::filesystem::path& chainDir);

struct VerifyResult {
    bool ok = false;
    std::string reason; // why not, when !ok
    std::optional<Manifest> manifest;
};

// Reads the manifest and every data byte of one checkpoint and checks sizes, checksums and padding.
// Throws FormatError for a newer format version; every other problem is a failed result.
VerifyResult verifyCheckpoint(const std::filesystem::path& checkpointDir, bool directIo = true);

// Removes all but the newest `keep` committed checkpoints, plus incomplete checkpoint directories
// (manifest.json absent: ENOENT) older than the newest committed one; a checkpoint whose manifest cannot
// be examined (statError) is never removed, nor are the iterations in `spare` (a node-local checkpoint
// still being drained). Returns what it removed.
std::vector<std::filesystem::path> pruneChain(
    const std::filesystem::path& chainDir, int keep, const std::set<std::uint64_t>& spare = {});

// Removes one checkpoint so that a crash at any moment leaves it either committed or gone.
void removeCheckpoint(const std::filesystem::path& checkpointDir);

struct HandoverWaitResult {
    bool found = false; // a matching final checkpoint committed in time
    double seconds = 0; // time spent waiting
    std::filesystem::path checkpoint; // the one found
    // Not found because batond's end marker (.baton-handover-ended) says the job of `seq >= minChainSeq`
    // has ended: what it ended as and which job it was ("job 42 ended NODE_FAIL"); empty otherwise.
    std::string predecessorEnded;
};

// Polls the chain's manifests (only those: cheap) every `pollSeconds` until a committed checkpoint is
// `final` with `seq >= minChainSeq`, the chain's end marker says the job of such a seq has ended (no final
// checkpoint will come), or `limitSeconds` have passed.
HandoverWaitResult waitForHandover(const std::filesystem::path& chainDir, std::uint64_t minChainSeq,
    double limitSeconds, double pollSeconds = 0.2);

// Whether batond's handover request in `chainDir` (contract::kHandoverRequestFile) asks the job of
// `chainSeq` (and `jobId`, where both name one) to take its final checkpoint and exit. A missing, torn,
// oversized or foreign-looking request asks nothing.
bool handoverRequested(
    const std::filesystem::path& chainDir, std::uint64_t chainSeq, std::optional<std::uint64_t> jobId);

// "<host>-<pid>": names this process's temporary directories in a chain (".ckpt-N.tmp-<tag>").
std::string temporaryOwnerTag();

// Removes temporary and half-deleted directories left in the chain by processes of this host that no
// longer run (a checkpoint moved aside by an interrupted replacement goes back to its name when nothing
// took that name), and those of other hosts once they are a day old.
void removeStaleTemporaries(const std::filesystem::path& chainDir);

} // namespace baton::ckpt
