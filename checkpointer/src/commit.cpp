#include "commit.hpp"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <system_error>

#include "baton/ckpt/chain.hpp"
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

} // namespace baton::ckpt
