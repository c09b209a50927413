#include "spool.hpp"

#include <command.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace baton::service {

namespace {

// In the child, as the owner: rename the spool aside (so the plugin starts a new one), read it, remove it.
[[noreturn]] void readAsOwner(const std::string& chainDir, const passwd& owner, std::size_t maxBytes, int out)
{
    if (setgroups(0, nullptr) != 0 || initgroups(owner.pw_name, owner.pw_gid) != 0
        || setgid(owner.pw_gid) != 0 || setuid(owner.pw_uid) != 0 || getuid() != owner.pw_uid)
        _exit(3);
    // A service user's CAP_SETUID/CAP_SETGID survive setuid: nothing of batond's rights stays here.
    if (!slurm::clearCapabilities())
        _exit(3);
    const int dir = open(chainDir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        _exit(errno == ENOENT ? 0 : 4);
    const int spool = openat(dir, ".baton-spool", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (spool < 0)
        _exit(errno == ENOENT ? 0 : 4);
    const std::string aside = "events.jsonl.collecting." + std::to_string(getpid());
    if (renameat(spool, "events.jsonl", spool, aside.c_str()) != 0)
        _exit(errno == ENOENT ? 0 : 5);
    const int file = openat(spool, aside.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
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
    unlinkat(spool, aside.c_str(), 0);
    _exit(0);
}

} // namespace

std::vector<std::string> collectSpool(
    const std::string& chainDir, std::int64_t ownerUid, std::size_t maxBytes)
{
    if (chainDir.empty() || chainDir.front() != '/')
        return {};
    passwd entry {};
    passwd* owner = nullptr;
    char names[16384];
    if (getpwuid_r(static_cast<uid_t>(ownerUid), &entry, names, sizeof names, &owner) != 0 || !owner)
        throw std::runtime_error("spool: no user with uid " + std::to_string(ownerUid));
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("spool: pipe: ") + std::strerror(errno));
    const pid_t child = fork();
    if (child < 0) {
        close(fds[0]);
        close(fds[1]);
        throw std::runtime_error(std::string("spool: fork: ") + std::strerror(errno));
    }
    if (child == 0) {
        close(fds[0]);
        readAsOwner(chainDir, *owner, maxBytes, fds[1]);
    }
    close(fds[1]);
    std::string text;
    char buffer[65536];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd ready { fds[0], POLLIN, 0 };
        if (left.count() <= 0 || poll(&ready, 1, static_cast<int>(left.count())) <= 0) {
            kill(child, SIGKILL); // a stalled file system must not stall the tick
            break;
        }
        const ssize_t got = read(fds[0], buffer, sizeof buffer);
        if (got <= 0)
            break;
        text.append(buffer,
            static_cast<std::size_t>(
                std::min<std::size_t>(got, maxBytes + 1 - std::min(maxBytes, text.size()))));
    }
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error("spool of " + chainDir + ": the collector as uid " + std::to_string(ownerUid)
            + " failed (status " + std::to_string(status) + ")");
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);)
        if (!line.empty())
            lines.push_back(line);
    return lines;
}

} // namespace baton::service
