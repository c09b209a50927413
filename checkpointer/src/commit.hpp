// The commit point of a checkpoint: its complete temporary directory appears under its final name in one
// rename. One DirectoryCommitter per level of storage, since each file system answers for itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::ckpt {

class DirectoryCommitter {
public:
    explicit DirectoryCommitter(std::function<void(const std::string&)> log)
        : log_(std::move(log))
    { }

    // Renames `temporary` to `final` (same directory) and makes the rename durable. An earlier checkpoint
    // of the same iteration is replaced without a moment in which neither exists under that name.
    void commit(const std::filesystem::path& temporary, const std::filesystem::path& final);
    // The whole protocol: `temporary` holds the checkpoint's durable data files; the manifest is written
    // last (fsynced, renamed into place), then the directory commits.
    void commitWithManifest(const std::filesystem::path& temporary, const std::string& manifestText,
        const std::filesystem::path& final, unsigned fileMode);

private:
    void commitWithPlainRename(const std::filesystem::path& temporary, const std::filesystem::path& final);

    std::function<void(const std::string&)> log_;
    bool renameFlagsRefused_ = false; // this file system answered EINVAL to renameat2 flags
};

// Rank 0's part of a multi-rank commit: the version 2 manifest text of `document` (the checkpoint's
// fields) naming every rank's shard (`shards[r]`: rank r's shard description with its "error"), each of
// which must lie in `directory` with the size its rank reported. Throws Error naming the rank that failed,
// wrote another iteration or whose file is missing; never returns what a reader would refuse.
std::string shardedManifest(nlohmann::json document, const std::vector<std::string>& shards,
    const std::filesystem::path& directory, std::uint64_t iteration);

} // namespace baton::ckpt
