#include "command.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace baton::slurm {

bool clearCapabilities() noexcept
{
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        return false;
    __user_cap_header_struct header { _LINUX_CAPABILITY_VERSION_3, 0 };
    __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] {};
    return syscall(SYS_capset, &header, none) == 0;
}

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void throwErrno(const std::string& what, int error = errno)
{
    throw std::system_error(error, std::generic_category(), what);
}

// What the child failed at before exec; sent to the parent over a close-on-exec pipe.
enum class Stage : int { stdio, setgroups, setgid, setuid, verify, chdir, exec };

const char* stageName(Stage s)
{
    switch (s) {
    case Stage::stdio:
        return "cannot set up standard streams for";
    case Stage::setgroups:
        return "setgroups failed for";
    case Stage::setgid:
        return "setgid failed for";
    case Stage::setuid:
        return "setuid failed for";
    case Stage::verify:
        return "credentials did not take effect for";
    case Stage::chdir:
        return "cannot enter the working directory of";
    case Stage::exec:
        return "cannot execute";
    }
    return "cannot start";
}

struct ChildFailure {
    Stage stage;
    int error;
};

class Fd {
public:
    Fd() = default;
    explicit Fd(int fd)
        : fd_(fd)
    { }
    ~Fd() { reset(); }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    void reset(int fd = -1)
    {
        if (fd_ >= 0)
            close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

void makePipe(Fd& readEnd, Fd& writeEnd)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        throwErrno("pipe2");
    readEnd.reset(fds[0]);
    writeEnd.reset(fds[1]);
}

// In the child, between fork and exec: async-signal-safe calls only (the parent may have threads).
[[noreturn]] void childFail(int reportFd, Stage stage)
{
    const ChildFailure failure { stage, errno };
    [[maybe_unused]] auto n = write(reportFd, &failure, sizeof failure);
    _exit(127);
}

[[noreturn]] void runChild(
    const CommandSpec& spec, char* const* argv, char* const* envp, int outFd, int errFd, int reportFd)
{
    // Its own process group, so that a timeout also ends whatever it started.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig)
        signal(sig, SIG_DFL);

    const int input = spec.stdinFd >= 0 ? spec.stdinFd : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (input < 0 || dup2(input, STDIN_FILENO) < 0 || dup2(outFd, STDOUT_FILENO) < 0
        || dup2(errFd, STDERR_FILENO) < 0)
        childFail(reportFd, Stage::stdio);
    // Nothing else of ours reaches the program (dup2 cleared close-on-exec on 0-2 only).
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        const long maxFd = sysconf(_SC_OPEN_MAX);
        for (int fd = 3; fd < (maxFd > 0 ? maxFd : 1024); ++fd)
            if (fd != reportFd)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
    }

    if (spec.credentials) {
        const Credentials& c = *spec.credentials;
        // Groups first, then the gid, then the uid: after setuid we could no longer change the others.
        if (setgroups(c.groups.size(), c.groups.data()) != 0)
            childFail(reportFd, Stage::setgroups);
        if (setgid(c.gid) != 0)
            childFail(reportFd, Stage::setgid);
        if (setuid(c.uid) != 0)
            childFail(reportFd, Stage::setuid);
        // From root, setuid cleared every capability. A non-root service user that holds CAP_SETUID and
        // CAP_SETGID (systemd's AmbientCapabilities) keeps them across setuid, and ambient ones even
        // across exec: clear them all, or the program could become root again.
        if (!clearCapabilities())
            childFail(reportFd, Stage::verify);
        // setuid may succeed partially (saved ids) on odd systems: check what we really are now, and
        // that root could not be regained.
        if (getuid() != c.uid || geteuid() != c.uid || getgid() != c.gid || getegid() != c.gid) {
            errno = EPERM;
            childFail(reportFd, Stage::verify);
        }
        if (c.uid != 0 && setuid(0) == 0) {
            errno = EPERM;
            childFail(reportFd, Stage::verify);
        }
    }
    // After the credential change, so that the owner's permissions apply to the directory.
    if (spec.workdir && chdir(spec.workdir->c_str()) != 0)
        childFail(reportFd, Stage::chdir);
    execve(argv[0], argv, envp);
    childFail(reportFd, Stage::exec);
}

std::vector<char*> cStrings(const std::vector<std::string>& strings)
{
    std::vector<char*> out;
    out.reserve(strings.size() + 1);
    for (const auto& s : strings)
        out.push_back(const_cast<char*>(s.c_str()));
    out.push_back(nullptr);
    return out;
}

void killGroup(pid_t pgid, int sig)
{
    // The group may already be gone; ESRCH is fine.
    kill(-pgid, sig);
}

} // namespace

std::string CommandResult::describe() const
{
    if (timedOut)
        return "timed out after " + std::to_string(elapsed.count()) + " ms";
    if (termSignal != 0)
        return "killed by signal " + std::to_string(termSignal) + " (" + strsignal(termSignal) + ")";
    return "exit status " + std::to_string(exitCode);
}

std::string formatArgv(const std::vector<std::string>& argv)
{
    std::string line;
    for (const auto& a : argv) {
        if (!line.empty())
            line += ' ';
        const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](unsigned char c) {
            return std::isalnum(c) || std::strchr("-_./=:,+@%", c) != nullptr;
        });
        if (plain) {
            line += a;
            continue;
        }
        line += '\'';
        for (char c : a)
            line += c == '\'' ? std::string("'\\''") : std::string(1, c);
        line += '\'';
    }
    return line;
}

std::optional<std::filesystem::path> findProgram(const std::string& name, const std::string& path)
{
    if (name.find('/') != std::string::npos)
        return access(name.c_str(), X_OK) == 0 ? std::optional<std::filesystem::path>(name) : std::nullopt;
    std::size_t begin = 0;
    while (begin <= path.size()) {
        std::size_t end = path.find(':', begin);
        if (end == std::string::npos)
            end = path.size();
        const std::string dir = path.substr(begin, end - begin);
        begin = end + 1;
        if (dir.empty() || dir.front() != '/')
            continue; // a relative entry would depend on our working directory
        const std::filesystem::path candidate = std::filesystem::path(dir) / name;
        std::error_code ec;
        if (std::filesystem::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0)
            return candidate;
    }
    return std::nullopt;
}

CommandResult runCommand(const CommandSpec& spec)
{
    if (spec.argv.empty() || spec.argv.front().empty())
        throw std::invalid_argument("runCommand: no program given");
    if (spec.argv.front().front() != '/')
        throw std::invalid_argument("runCommand: the program needs an absolute path: " + spec.argv.front());

    // Everything the child touches is prepared before fork: it may not allocate.
    const auto argv = cStrings(spec.argv);
    const auto envp = cStrings(spec.env);
    Fd outRead, outWrite, errRead, errWrite, reportRead, reportWrite;
    makePipe(outRead, outWrite);
    makePipe(errRead, errWrite);
    makePipe(reportRead, reportWrite);

    const auto started = Clock::now();
    const pid_t pid = fork();
    if (pid < 0)
        throwErrno("fork");
    if (pid == 0)
        runChild(spec, argv.data(), envp.data(), outWrite.get(), errWrite.get(), reportWrite.get());
    // Also set here: whichever runs first, the group exists before we might signal it.
    setpgid(pid, pid);
    outWrite.reset();
    errWrite.reset();
    reportWrite.reset();

    // Until exec the child may hang too (a working directory on a dead file server): the timeout
    // covers that wait as well.
    ChildFailure failure {};
    ssize_t got = -1;
    for (;;) {
        const auto left
            = std::chrono::duration_cast<std::chrono::milliseconds>(started + spec.timeout - Clock::now());
        pollfd pfd { reportRead.get(), POLLIN, 0 };
        const int ready = poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready == 0) {
            killGroup(pid, SIGKILL);
            kill(pid, SIGKILL); // before exec its group may not exist yet
            int status;
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
            CommandResult late;
            late.timedOut = true;
            late.termSignal = SIGKILL;
            late.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
            return late;
        }
        do
            got = read(reportRead.get(), &failure, sizeof failure);
        while (got < 0 && errno == EINTR);
        break;
    }
    if (got == static_cast<ssize_t>(sizeof failure)) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
        throwErrno(std::string(stageName(failure.stage)) + " " + formatArgv(spec.argv), failure.error);
    }
    reportRead.reset();

    CommandResult result;
    struct Stream {
        Fd* fd;
        std::string* text;
        bool* truncated;
    };
    std::array<Stream, 2> streams { Stream { &outRead, &result.out, &result.outTruncated },
        Stream { &errRead, &result.err, &result.errTruncated } };
    auto killAt = started + spec.timeout; // first SIGTERM, then SIGKILL after the grace
    int killStage = 0;
    bool exited = false;
    int status = 0;
    std::array<char, 16384> buffer;

    for (;;) {
        if (!exited) {
            const pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) {
                exited = true;
                // Whatever it left behind gets a grace to finish writing, not the whole timeout.
                killAt = std::min(killAt, Clock::now() + spec.killGrace);
            } else if (w < 0 && errno != EINTR) {
                throwErrno("waitpid");
            }
        }
        const bool streamsOpen = outRead.get() >= 0 || errRead.get() >= 0;
        if (exited && (!streamsOpen || killStage > 0))
            break;

        const auto now = Clock::now();
        if (now >= killAt) {
            if (exited) {
                killGroup(pid, SIGKILL); // leftovers of a program that itself finished in time
                break;
            }
            if (killStage == 0) {
                result.timedOut = true;
                killGroup(pid, SIGTERM);
                killAt = now + spec.killGrace;
            } else {
                killGroup(pid, SIGKILL);
                killAt = now + std::chrono::seconds(1);
            }
            ++killStage;
            continue;
        }

        // Wake up at least every 50 ms to notice the child's exit while a grandchild holds the pipes.
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(killAt - now)
            + std::chrono::milliseconds(1);
        wait = std::min(wait, std::chrono::milliseconds(exited ? 50 : 20));
        std::array<pollfd, 2> fds {};
        nfds_t n = 0;
        std::array<Stream*, 2> polled {};
        for (auto& s : streams)
            if (s.fd->get() >= 0) {
                fds[n] = { s.fd->get(), POLLIN, 0 };
                polled[n++] = &s;
            }
        if (n == 0) {
            // Pipes closed but the child has not exited yet: wait for it in short steps.
            usleep(static_cast<useconds_t>(std::min<long>(wait.count(), 5) * 1000));
            continue;
        }
        const int ready = poll(fds.data(), n, static_cast<int>(wait.count()));
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            throwErrno("poll");
        }
        for (nfds_t i = 0; i < n; ++i) {
            if (fds[i].revents == 0)
                continue;
            Stream& s = *polled[i];
            const ssize_t r = read(s.fd->get(), buffer.data(), buffer.size());
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                s.fd->reset();
                continue;
            }
            const std::size_t room = spec.maxOutputBytes - std::min(spec.maxOutputBytes, s.text->size());
            const std::size_t keep = std::min(room, static_cast<std::size_t>(r));
            s.text->append(buffer.data(), keep);
            if (keep < static_cast<std::size_t>(r))
                *s.truncated = true;
        }
    }
    if (!exited) {
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR)
                throwErrno("waitpid");
    }
    result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    if (WIFEXITED(status))
        result.exitCode = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        result.termSignal = WTERMSIG(status);
    return result;
}

} // namespace baton::slurm
