#include "chain_files.hpp"

#include "unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <vector>

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

// Reads the whole registry if it lies within `limits`; throws std::runtime_error saying which bound a
// file the job user wrote exceeds. The size is checked before reading (a huge sparse file costs
// nothing), and again while reading in case the file grows meanwhile.
std::string readRegistry(int fd, const RegistryLimits& limits)
{
    const auto deadline = std::chrono::steady_clock::now() + limits.timeLimit;
    const auto tooLarge = [&](std::uint64_t size) {
        return std::runtime_error(std::string("refusing '") + jobRegistryName + "': " + std::to_string(size)
            + " bytes, more than the " + std::to_string(limits.maxBytes)
            + " a chain's job list can need; move it away to count the chain's jobs from 0 again");
    };
    struct stat info { };
    if (::fstat(fd, &info) != 0) {
        throw fileError("cannot stat", jobRegistryName);
    }
    if (static_cast<std::uint64_t>(info.st_size) > limits.maxBytes) {
        throw tooLarge(static_cast<std::uint64_t>(info.st_size));
    }
    std::string text;
    char buffer[65536];
    while (text.size() <= limits.maxBytes) {
        if (std::chrono::steady_clock::now() >= deadline) {
            throw std::runtime_error(std::string("timed out reading '") + jobRegistryName + "'");
        }
        const ssize_t got = ::read(fd, buffer, std::min(sizeof buffer, limits.maxBytes + 1 - text.size()));
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw fileError("cannot read", jobRegistryName);
        }
        if (got == 0) {
            return text;
        }
        text.append(buffer, static_cast<std::size_t>(got));
    }
    throw tooLarge(text.size());
}

// A registry line: a Slurm job id (1..10 decimal digits, as registerJob writes it).
std::optional<std::uint32_t> parseJobId(std::string_view text)
{
    std::uint32_t id = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, id);
    if (text.empty() || text.size() > 10 || ec != std::errc() || ptr != end) {
        return std::nullopt;
    }
    return id;
}

} // namespace

int registerJob(int chainDirFd, std::string_view jobId, std::chrono::milliseconds lockTimeout,
    const RegistryLimits& limits)
{
    const auto id = parseJobId(jobId);
    if (!id) {
        throw std::invalid_argument("not a Slurm job id: '" + std::string(jobId) + "'");
    }
    UniqueFd fd = openRegular(chainDirFd, jobRegistryName, O_RDWR | O_APPEND);
    lockWithTimeout(fd.get(), jobRegistryName, lockTimeout);
    const std::string text = readRegistry(fd.get(), limits);
    // The ids listed before this job's first line; counted once each after the scan.
    std::vector<std::uint32_t> earlier;
    std::size_t start = 0;
    std::size_t lineNumber = 0;
    bool found = false;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) {
            end = text.size(); // a torn last line (full disk) still names a job
        }
        const std::string_view line(text.data() + start, end - start);
        start = end + 1;
        if (++lineNumber > limits.maxLines) {
            throw std::runtime_error(std::string("refusing '") + jobRegistryName + "': more than "
                + std::to_string(limits.maxLines) + " lines");
        }
        if (line.empty()) {
            continue;
        }
        const auto listed = parseJobId(line);
        if (!listed) {
            throw std::runtime_error(std::string("refusing '") + jobRegistryName + "': line "
                + std::to_string(lineNumber) + " is not a job id (" + std::to_string(line.size())
                + " bytes); remove that line or move the file away");
        }
        if (*listed == *id) {
            found = true;
            break;
        }
        earlier.push_back(*listed);
    }
    std::sort(earlier.begin(), earlier.end());
    const auto count = static_cast<int>(std::unique(earlier.begin(), earlier.end()) - earlier.begin());
    if (found) {
        return count;
    }
    std::string entry;
    if (!text.empty() && text.back() != '\n') {
        entry += '\n';
    }
    entry += std::to_string(*id) + "\n";
    writeAll(fd.get(), entry, jobRegistryName);
    if (::fsync(fd.get()) != 0) {
        throw fileError("cannot sync", jobRegistryName);
    }
    return count;
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
