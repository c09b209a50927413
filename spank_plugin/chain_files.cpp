#include "chain_files.hpp"

#include "unique_fd.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>

namespace baton::spank {

namespace {

std::runtime_error fileError(const std::string& what, const std::string& name)
{
    return std::runtime_error(what + " '" + name + "': " + std::strerror(errno));
}

// Opens a regular file for appending below `dirFd` without following links or blocking on FIFOs.
UniqueFd openRegular(int dirFd, const char* name, int accessFlags)
{
    UniqueFd fd(::openat(dirFd, name, accessFlags | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600));
    if (!fd.valid()) {
        throw fileError("cannot open", name);
    }
    struct stat info { };
    if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
        throw std::runtime_error(std::string("refusing '") + name + "': not a regular file");
    }
    return fd;
}

// flock with a deadline, so that a stuck holder cannot hang the caller.
void lockWithTimeout(int fd, const char* name, std::chrono::milliseconds timeout)
{
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            throw fileError("cannot lock", name);
        }
        if (std::chrono::steady_clock::now() >= deadline) {
            throw std::runtime_error(std::string("timed out waiting for the lock on '") + name + "'");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

void writeAll(int fd, std::string_view data, const char* name)
{
    while (!data.empty()) {
        const ssize_t written = ::write(fd, data.data(), data.size());
        if (written < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw fileError("cannot write", name);
        }
        data.remove_prefix(static_cast<std::size_t>(written));
    }
}

std::string readAll(int fd, const char* name)
{
    std::string text;
    char buffer[8192];
    for (;;) {
        const ssize_t got = ::read(fd, buffer, sizeof buffer);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw fileError("cannot read", name);
        }
        if (got == 0) {
            return text;
        }
        text.append(buffer, static_cast<std::size_t>(got));
    }
}

} // namespace

int registerJob(int chainDirFd, std::string_view jobId, std::chrono::milliseconds lockTimeout)
{
    UniqueFd fd = openRegular(chainDirFd, jobRegistryName, O_RDWR | O_APPEND);
    lockWithTimeout(fd.get(), jobRegistryName, lockTimeout);
    const std::string text = readAll(fd.get(), jobRegistryName);
    std::set<std::string, std::less<>> earlier;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) {
            end = text.size(); // a torn last line (full disk) still names a job
        }
        const std::string_view line(text.data() + start, end - start);
        if (line == jobId) {
            return static_cast<int>(earlier.size());
        }
        if (!line.empty()) {
            earlier.emplace(line);
        }
        start = end + 1;
    }
    std::string entry;
    if (!text.empty() && text.back() != '\n') {
        entry += '\n';
    }
    entry += std::string(jobId) + "\n";
    writeAll(fd.get(), entry, jobRegistryName);
    if (::fsync(fd.get()) != 0) {
        throw fileError("cannot sync", jobRegistryName);
    }
    return static_cast<int>(earlier.size());
}

void appendToSpool(int chainDirFd, std::string_view line, std::chrono::milliseconds lockTimeout)
{
    if (::mkdirat(chainDirFd, spoolDirName, 0700) != 0 && errno != EEXIST) {
        throw fileError("cannot create", spoolDirName);
    }
    UniqueFd dir(::openat(chainDirFd, spoolDirName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) {
        throw fileError("cannot open", spoolDirName);
    }
    UniqueFd fd = openRegular(dir.get(), spoolFileName, O_RDWR | O_APPEND);
    lockWithTimeout(fd.get(), spoolFileName, lockTimeout);
    std::string record;
    // A line torn by an earlier failed write is closed first, so that this record stays parseable.
    struct stat info { };
    char last = '\n';
    if (::fstat(fd.get(), &info) == 0 && info.st_size > 0
        && ::pread(fd.get(), &last, 1, info.st_size - 1) == 1 && last != '\n') {
        record += '\n';
    }
    record += line;
    record += '\n';
    writeAll(fd.get(), record, spoolFileName);
    if (::fsync(fd.get()) != 0) {
        throw fileError("cannot sync", spoolFileName);
    }
}

} // namespace baton::spank
