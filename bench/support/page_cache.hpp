// Reads measured cold: a file's pages are written back and dropped from the page cache first, for
// baton and baseline alike.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

namespace baton::bench {

inline void dropCache(const std::filesystem::path& file)
{
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

} // namespace baton::bench
