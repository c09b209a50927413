#include "owner_files.hpp"

#include "common/baton_contract.hpp"

#include "common/run_as.hpp"
#include "slurm/command.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
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

// Appends this process's pid to the name in `name` (64 bytes, room left), without allocating: the
// children below run between fork and exit, where only async-signal-safe calls are allowed.
void appendPid(char (&name)[64])
{
    char digits[16];
    int count = 0;
    for (auto pid = static_cast<unsigned long>(getpid()); count == 0 || pid > 0; pid /= 10)
        digits[count++] = static_cast<char>('0' + pid % 10);
    std::size_t at = std::strlen(name);
    while (count > 0)
        name[at++] = digits[--count];
    name[at] = '\0';
}

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
    char aside[64] = "events.jsonl.collecting.";
    appendPid(aside);
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

// In the child, as the owner: the file `name` goes to a temporary name of this child's, reaches the disk,
// and replaces the old one in one rename, so that a job reads the old file or the new one, whole.
[[noreturn]] void writeFileAsOwner(const std::string& chainDir, const os::Credentials& owner, const char* name,
    const char* text, std::size_t size)
{
    if (os::becomeOwner(owner))
        _exit(3);
    const int dir = open(chainDir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        _exit(4);
    char temporary[64];
    std::snprintf(temporary, sizeof temporary, "%s.tmp-", name);
    appendPid(temporary);
    unlinkat(dir, temporary, 0); // a killed child of the same pid's
    const int file = openat(dir, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (file < 0)
        _exit(5);
    if (write(file, text, size) != static_cast<ssize_t>(size) || fsync(file) != 0) {
        unlinkat(dir, temporary, 0);
        _exit(6);
    }
    close(file);
    if (renameat(dir, temporary, dir, name) != 0) {
        unlinkat(dir, temporary, 0);
        _exit(7);
    }
    fsync(dir);
    _exit(0);
}

// Runs `body(write end)` in a child forked for the owner of `ownerUid` and returns what it wrote to the
// pipe, at most `maxBytes` (more is cut). Throws std::runtime_error naming `what` when the child cannot
// be started, fails, or outlives `timeout` (it is then killed, or abandoned if even that fails).
// What a child's exit code means (its steps exit 3 and up); empty for one without a meaning of its own.
std::string exitMeaning(int code)
{
    switch (code) {
    case 3: return "cannot take the owner's identity";
    case 4: return "cannot open the chain directory as its owner";
    case 5: return "cannot create or move a file there as its owner";
    case 6: return "cannot open, write or sync the file, or it is not a regular file";
    case 7: return "cannot rename the file into place, or pass its bytes on";
    default: return {};
    }
}

template<typename Body>
std::string runAsOwner(const std::string& what, std::int64_t ownerUid, std::size_t maxBytes,
    std::chrono::milliseconds timeout, Body body)
{
    slurm::reapAbandonedChildren();
    os::Credentials owner;
    try {
        owner = os::credentialsOf(static_cast<uid_t>(ownerUid));
    } catch (const std::exception& error) {
        throw std::runtime_error(what + ": " + error.what());
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        throw std::runtime_error(what + ": pipe: " + std::strerror(errno));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const pid_t child = fork();
    if (child < 0) {
        close(fds[0]);
        close(fds[1]);
        throw std::runtime_error(what + ": fork: " + std::strerror(errno));
    }
    if (child == 0) {
        close(fds[0]);
        body(owner, fds[1]);
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
        throw std::runtime_error(what + ": the child as uid " + std::to_string(ownerUid)
            + " did not end and could not be killed; left to be collected later");
    if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
        const std::string meaning = WIFEXITED(*status) ? exitMeaning(WEXITSTATUS(*status)) : std::string();
        throw std::runtime_error(what + ": the child as uid " + std::to_string(ownerUid) + " failed ("
            + (meaning.empty() ? "status " + std::to_string(*status) : meaning) + ")");
    }
    return text;
}

} // namespace

std::vector<std::string> collectSpool(const std::string& chainDir, std::int64_t ownerUid,
    std::size_t maxBytes, std::chrono::milliseconds timeout)
{
    if (chainDir.empty() || chainDir.front() != '/')
        return {};
    const std::string text = runAsOwner("spool of " + chainDir, ownerUid, maxBytes, timeout,
        [&](const os::Credentials& owner, int out) { readAsOwner(chainDir, owner, maxBytes, out); });
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);)
        if (!line.empty())
            lines.push_back(line);
    return lines;
}

void writeHandoverFile(const std::string& chainDir, std::int64_t ownerUid, HandoverFile file,
    const std::string& text, std::chrono::milliseconds timeout)
{
    const bool request = file == HandoverFile::Request;
    const char* what = request ? "handover request" : "handover marker";
    const char* name = request ? contract::kHandoverRequestFile : contract::kHandoverEndedFile;
    if (chainDir.empty() || chainDir.front() != '/')
        throw std::runtime_error(std::string(what) + ": the chain directory '" + chainDir + "' is not absolute");
    if (text.size() > (request ? contract::kHandoverRequestMaxBytes : contract::kHandoverEndedMaxBytes))
        throw std::runtime_error(std::string(what) + ": " + std::to_string(text.size()) + " bytes, over the bound");
    runAsOwner(std::string(what) + " in " + chainDir, ownerUid, 0, timeout, [&](const os::Credentials& owner, int) {
        writeFileAsOwner(chainDir, owner, name, text.data(), text.size());
    });
}

} // namespace baton::service
