#include "commit.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "io.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;

// renameat2 with RENAME_NOREPLACE, then RENAME_EXCHANGE for a checkpoint of the same iteration. NFS (and
// FUSE without rename2) refuse any rename flags with EINVAL: then plain rename(2) does the same job, and
// the Checkpointer stops trying the flags.
void DirectoryCommitter::commit(const fs::path& temporary, const fs::path& final)
{
    const fs::path chain = final.parent_path();
    if (!renameFlagsRefused_) {
        if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, final.c_str(), RENAME_NOREPLACE) == 0) {
            io::fsyncDirectory(chain);
            return;
        }
        if (errno == EEXIST || errno == ENOTEMPTY) {
            // An earlier checkpoint of the same iteration: swap atomically, then drop the old one.
            if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, final.c_str(), RENAME_EXCHANGE) == 0) {
                io::fsyncDirectory(chain);
                std::error_code ec;
                fs::remove_all(temporary, ec);
                return;
            }
        }
        if (errno != EINVAL && errno != ENOSYS)
            io::throwErrno("cannot commit " + final.string());
        renameFlagsRefused_ = true;
        log_("the file system of " + chain.string()
            + " refuses rename flags (as NFS does): committing with plain rename(2)");
    }
    commitWithPlainRename(temporary, final);
}

void DirectoryCommitter::commitWithManifest(
    const fs::path& temporary, const std::string& manifestText, const fs::path& final, unsigned fileMode)
{
    // The data files were fsynced by their writers; their names in the directory become durable here.
    io::fsyncDirectory(temporary);
    io::writeSmallFileDurably(temporary / "manifest.json.tmp", manifestText, fileMode);
    io::renameDurably(temporary / "manifest.json.tmp", temporary / kManifestName);
    commit(temporary, final);
}

// rename(2) of a directory never replaces a non-empty one (EEXIST / ENOTEMPTY), so a fresh name commits
// exactly as RENAME_NOREPLACE does. Replacing a checkpoint of the same iteration takes two renames: the
// old one moves aside to ".ckpt-N.replaced-<host>-<pid>" first. A crash between them leaves no ckpt-N;
// removeStaleTemporaries() then moves the old checkpoint back, so a committed iteration never vanishes.
void DirectoryCommitter::commitWithPlainRename(const fs::path& temporary, const fs::path& final)
{
    const fs::path chain = final.parent_path();
    if (::rename(temporary.c_str(), final.c_str()) == 0) {
        io::fsyncDirectory(chain);
        return;
    }
    if (errno != EEXIST && errno != ENOTEMPTY)
        io::throwErrno("cannot commit " + final.string());
    const fs::path aside = chain / ("." + final.filename().string() + ".replaced-" + temporaryOwnerTag());
    std::error_code ec;
    fs::remove_all(aside, ec);
    io::renameDurably(final, aside);
    if (::rename(temporary.c_str(), final.c_str()) != 0) {
        const int error = errno;
        if (::rename(aside.c_str(), final.c_str()) == 0)
            io::fsyncDirectory(chain);
        throw io::IoError(error, "cannot commit " + final.string());
    }
    io::fsyncDirectory(chain);
    fs::remove_all(aside, ec);
}

std::string shardedManifest(nlohmann::json document, const std::vector<std::string>& shards,
    const fs::path& directory, std::uint64_t iteration)
{
    auto files = nlohmann::json::array();
    auto regionEntries = nlohmann::json::array();
    auto blobEntries = nlohmann::json::array();
    std::uint64_t total = 0;
    for (std::size_t r = 0; r < shards.size(); ++r) {
        nlohmann::json other = nlohmann::json::parse(shards[r], nullptr, false);
        if (other.is_discarded() || !other.is_object() || !other.contains("error"))
            throw Error("rank " + std::to_string(r) + " sent an unreadable shard description");
        if (!other["error"].get<std::string>().empty())
            throw Error("rank " + std::to_string(r) + ": " + other["error"].get<std::string>());
        // Operations match by order: ranks that requested different checkpoints would otherwise be
        // committed together as one.
        if (other["iteration"].get<std::uint64_t>() != iteration)
            throw Error("rank " + std::to_string(r) + " checkpointed iteration " + other["iteration"].dump()
                + " while rank 0 checkpointed " + std::to_string(iteration)
                + ": every rank must request the same checkpoints");
        // Each rank's file must be there with the size it reported before the manifest names it.
        const auto path = directory / other["file"].get<std::string>();
        struct stat st { };
        if (::stat(path.c_str(), &st) != 0)
            io::throwErrno("rank " + std::to_string(r) + "'s shard " + path.string() + " is missing");
        if (static_cast<std::uint64_t>(st.st_size) != other["size"].get<std::uint64_t>())
            throw Error("rank " + std::to_string(r) + "'s shard " + path.string() + " has "
                + std::to_string(st.st_size) + " bytes, not the " + other["size"].dump() + " it wrote");
        files.push_back({ { "name", other["file"] }, { "rank", other["rank"] }, { "size", other["size"] } });
        total += other["size"].get<std::uint64_t>();
        for (auto& entry : other["regions"])
            regionEntries.push_back(std::move(entry));
        for (auto& entry : other["blobs"])
            blobEntries.push_back(std::move(entry));
    }
    // Version 3 only where a tensor piece needs it: a data-parallel checkpoint stays readable by version 2's
    // readers.
    const bool tensors = std::any_of(regionEntries.begin(), regionEntries.end(),
        [](const nlohmann::json& entry) { return entry.value("layout", "") == kLayoutBox; });
    document["format_version"] = tensors ? kTensorFormatVersion : kShardedFormatVersion;
    document["world_size"] = shards.size();
    document["total_bytes"] = total;
    document["files"] = std::move(files);
    document["regions"] = std::move(regionEntries);
    document["blobs"] = std::move(blobEntries);
    std::string text = renderManifest(document);
    (void)parseManifest(text);
    return text;
}

} // namespace baton::ckpt
