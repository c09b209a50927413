// The commit point of a checkpoint: its complete temporary directory appears under its final name in one
// rename. One DirectoryCommitter per level of storage, since each file system answers for itself.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace baton::ckpt {

class DirectoryCommitter {
public:
    explicit DirectoryCommitter(std::function<void(const std::string&)> log)
        : log_(std::move(log))
    { }

    // Renames `temporary` to `final` (same directory) and makes the rename durable. An earlier checkpoint
    // of the same iteration is replaced without a moment in which neither exists under that name.
    void commit(const std::filesystem::path& temporary, const std::filesystem::path& final);

private:
    void commitWithPlainRename(const std::filesystem::path& temporary, const std::filesystem::path& final);

    std::function<void(const std::string&)> log_;
    bool renameFlagsRefused_ = false; // this file system answered EINVAL to renameat2 flags
};

} // namespace baton::ckpt
