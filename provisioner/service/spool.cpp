#include "spool.hpp"

#include "common/run_as.hpp"
#include "slurm/command.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace baton::service {

namespace {

// How long the collector may take to die once killed before it is abandoned.
constexpr std::chrono::milliseconds killWait { 1'000 };

// In the child, as the owner: rename the spool aside (so the plugin starts a new one), read it, remove it.
// batond has threads: between fork and exit only async-signal-safe calls, so the owner's groups were
// resolved before fork.
[[noreturn]] void readAsOwner(
    const std::string& chainDir, const os::Credentials& owner, std::size_t maxBytes, int out)
{
    if (os::becomeOwner(owner))
        _exit(3);
    const int dir = open(chainDir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        _exit(errno == ENOENT ? 0 : 4);
    const int spool = openat(dir, ".baton-spool", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (spool < 0)
        _exit(errno == ENOENT ? 0 : 4);
    // "events.jsonl.collecting.<pid>", written without allocating.
    char aside[64] = "events.jsonl.collecting.";
    char digits[16];
    int count = 0;
    for (auto pid = static_cast<unsigned long>(getpid()); count == 0 || pid > 0; pid /= 10)
        digits[count++] = static_cast<char>('0' + pid % 10);
    std::size_t at = std::strlen(aside);
    while (count > 0)
        aside[at++] = digits[--count];
    aside[at] = '\0';
    if (renameat(spool, "events.jsonl", spool, aside) != 0)
        _exit(errno == ENOENT ? 0 : 5);
    const int file = openat(spool, aside, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat info { };
    if (file < 0 || fstat(file, &info) != 0 || !S_ISREG(info.st_mode))
        _exit(6);
    char buffer[65536];
    std::size_t total = 0;
    for (ssize_t got; total < maxBytes && (got = read(file, buffer, sizeof buffer)) > 0;) {
        const std::size_t keep = std::min<std::size_t>(static_cast<std::size_t>(got), maxBytes - total);
        if (write(out, buffer, keep) != static_cast<ssize_t>(keep))
            _exit(7);
        total += keep;
    }
    unlinkat(spool, aside, 0);
    _exit(0);
}

} // namespace

std::vector<std::string> collectSpool(const std::string& chainDir, std::int64_t ownerUid,
    std::size_t maxBytes, std::chrono::milliseconds timeout)
{
    if (chainDir.empty() || chainDir.front() != '/')
        return {};
    slurm::reapAbandonedChildren();
    os::Credentials owner;
    try {
        owner = os::credentialsOf(static_cast<uid_t>(ownerUid));
    } catch (const std::exception& error) {
        throw std::runtime_error(std::string("spool: ") + error.what());
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("spool: pipe: ") + std::strerror(errno));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const pid_t child = fork();
    if (child < 0) {
        close(fds[0]);
        close(fds[1]);
        throw std::runtime_error(std::string("spool: fork: ") + std::strerror(errno));
    }
    if (child == 0) {
        close(fds[0]);
        readAsOwner(chainDir, owner, maxBytes, fds[1]);
    }
    close(fds[1]);
    std::string text;
    char buffer[65536];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd ready { fds[0], POLLIN, 0 };
        if (left.count() <= 0 || poll(&ready, 1, static_cast<int>(left.count())) <= 0)
            break; // a stalled file system must not stall the tick: the child is ended below
        const ssize_t got = read(fds[0], buffer, sizeof buffer);
        if (got <= 0)
            break;
        text.append(buffer,
            static_cast<std::size_t>(
                std::min<std::size_t>(got, maxBytes + 1 - std::min(maxBytes, text.size()))));
    }
    close(fds[0]);
    // Killed at the deadline if it has not ended; abandoned if even that fails (batond without CAP_KILL,
    // a process stuck in the kernel): the tick goes on either way.
    const auto status = slurm::awaitChild(child, deadline, killWait, false);
    if (!status)
        throw std::runtime_error("spool of " + chainDir + ": the collector as uid " + std::to_string(ownerUid)
            + " did not end and could not be killed; left to be collected later");
    if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0)
        throw std::runtime_error("spool of " + chainDir + ": the collector as uid " + std::to_string(ownerUid)
            + " failed (status " + std::to_string(*status) + ")");
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);)
        if (!line.empty())
            lines.push_back(line);
    return lines;
}

} // namespace baton::service
