#include "command.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace baton::slurm {

namespace {

using Clock = std::chrono::steady_clock;

// How long a child may take to die after SIGKILL before it is abandoned. A process that SIGKILL has
// reached dies at once unless it is inside an uninterruptible kernel call (a hard-mounted NFS server
// that does not answer); waiting longer would only block the caller.
constexpr std::chrono::milliseconds killWait { 1'000 };

// The abandoned children, collected by reapAbandonedChildren().
std::mutex abandonedMutex;
std::vector<pid_t> abandonedPids;
std::atomic<std::uint64_t> abandonedTotal { 0 };

[[noreturn]] void throwErrno(const std::string& what, int error = errno)
{
    throw std::system_error(error, std::generic_category(), what);
}

// What the child failed at before exec; sent to the parent over a close-on-exec pipe.
enum class Stage : int { stdio, owner, chdir, exec };

const char* stageName(Stage s, os::DropStep step)
{
    switch (s) {
    case Stage::stdio:
        return "cannot set up standard streams for";
    case Stage::owner:
        return os::dropStepText(step);
    case Stage::chdir:
        return "cannot enter the working directory of";
    case Stage::exec:
        return "cannot execute";
    }
    return "cannot start";
}

struct ChildFailure {
    Stage stage;
    os::DropStep step; // for Stage::owner
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
[[noreturn]] void childFail(int reportFd, Stage stage, os::DropStep step = os::DropStep::verify)
{
    const ChildFailure failure { stage, step, errno };
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
        if (const auto failed = os::becomeOwner(*spec.credentials))
            childFail(reportFd, Stage::owner, *failed);
    } else if (!os::clearCapabilities()) {
        // A Slurm client run as the service user must not inherit batond's ambient capabilities either.
        // (Root regains its own at exec anyway.)
        childFail(reportFd, Stage::owner, os::DropStep::verify);
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

// Sends `sig` to the child's process group when `group` (the child's pid is its group's id), else or
// failing that (before exec the group may not exist yet) to the child alone. False only when the
// kernel refused: a process without CAP_KILL may not signal a child that has switched to another uid.
// A group or child already gone (ESRCH) counts as signalled.
bool signalChild(pid_t pid, int sig, bool group)
{
    if (group && kill(-pid, sig) == 0)
        return true;
    if (kill(pid, sig) == 0)
        return true;
    return errno != EPERM;
}

// Fills in how the child ended from its wait status.
void takeStatus(CommandResult& result, int status)
{
    if (WIFEXITED(status))
        result.exitCode = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        result.termSignal = WTERMSIG(status);
}

} // namespace

void abandonChild(pid_t pid)
{
    {
        const std::lock_guard lock(abandonedMutex);
        abandonedPids.push_back(pid);
    }
    abandonedTotal.fetch_add(1, std::memory_order_relaxed);
}

std::size_t reapAbandonedChildren() noexcept
{
    const std::lock_guard lock(abandonedMutex);
    std::erase_if(abandonedPids, [](pid_t pid) {
        int status = 0;
        pid_t got;
        do
            got = waitpid(pid, &status, WNOHANG);
        while (got < 0 && errno == EINTR);
        return got == pid || (got < 0 && errno == ECHILD);
    });
    return abandonedPids.size();
}

std::uint64_t abandonedChildren() noexcept
{
    return abandonedTotal.load(std::memory_order_relaxed);
}

std::optional<int> awaitChild(
    pid_t pid, Clock::time_point deadline, std::chrono::milliseconds grace, bool group)
{
    auto until = deadline;
    bool killed = false;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
        int status = 0;
        const pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return status;
        if (got < 0 && errno != EINTR)
            throwErrno("waitpid");
        const auto now = Clock::now();
        if (now >= until) {
            if (killed || !signalChild(pid, SIGKILL, group)) {
                abandonChild(pid);
                return std::nullopt;
            }
            killed = true;
            until = now + grace;
            pause = std::chrono::milliseconds(1);
            continue;
        }
        // Short sleeps, doubling up to 20 ms: a child that is about to exit is collected at once.
        std::this_thread::sleep_for(std::min<Clock::duration>(pause, until - now));
        pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
}

std::string CommandResult::describe() const
{
    if (abandoned)
        return "timed out after " + std::to_string(elapsed.count())
            + " ms; the process could not be ended and was left to be collected later";
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

namespace {

std::chrono::milliseconds since(Clock::time_point started)
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
}

// Whatever leaves runCommand before the child was collected (an exception) kills it and hands it to
// the reaper: never a zombie, never a wait.
struct PendingChild {
    pid_t pid;
    bool settled = false;
    ~PendingChild()
    {
        if (settled)
            return;
        signalChild(pid, SIGKILL, true);
        try {
            abandonChild(pid);
        } catch (...) { }
    }
};

// Waits for the child's report from before exec, which the pipe's close-on-exec ends empty. Until
// exec the child may hang too (a working directory on a dead file server): the timeout covers that
// wait as well. Returns the result of a child that timed out before exec, nothing once it has
// exec'ed; throws what the child reported it failed at.
std::optional<CommandResult> awaitExec(
    const CommandSpec& spec, PendingChild& pending, const Fd& reportRead, Clock::time_point started)
{
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
            pending.settled = true;
            const auto status = awaitChild(pending.pid, Clock::now(), killWait, true);
            CommandResult late;
            late.timedOut = true;
            late.abandoned = !status;
            if (status)
                takeStatus(late, *status);
            late.elapsed = since(started);
            return late;
        }
        do
            got = read(reportRead.get(), &failure, sizeof failure);
        while (got < 0 && errno == EINTR);
        break;
    }
    if (got == static_cast<ssize_t>(sizeof failure)) {
        // It exits right after reporting, unless someone stopped it in between.
        pending.settled = true;
        awaitChild(pending.pid, Clock::now() + killWait, killWait, true);
        throwErrno(std::string(stageName(failure.stage, failure.step)) + " " + formatArgv(spec.argv), failure.error);
    }
    return std::nullopt;
}

// Whether the child has exited, seen but not collected (WNOWAIT): until it is, its pid, which is also
// its process group's id, cannot be given to another process, so killing leftovers of the group
// cannot hit a stranger.
bool hasExited(pid_t pid)
{
    siginfo_t info {};
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0)
        return info.si_pid == pid;
    if (errno != EINTR)
        throwErrno("waitid");
    return false;
}

// One of the child's output pipes and the text read from it.
struct Stream {
    Fd* fd;
    std::string* text;
    bool* truncated;
};

// Reads what arrives on the open streams within `wait`, keeping up to maxBytes of each; a stream at
// its end is closed.
void readStreams(std::array<Stream, 2>& streams, std::size_t maxBytes, std::chrono::milliseconds wait)
{
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
        return;
    }
    const int ready = poll(fds.data(), n, static_cast<int>(wait.count()));
    if (ready < 0) {
        if (errno == EINTR)
            return;
        throwErrno("poll");
    }
    std::array<char, 16384> buffer;
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
        const std::size_t room = maxBytes - std::min(maxBytes, s.text->size());
        const std::size_t keep = std::min(room, static_cast<std::size_t>(r));
        s.text->append(buffer.data(), keep);
        if (keep < static_cast<std::size_t>(r))
            *s.truncated = true;
    }
}

// Reads the exec'ed child's output until it has exited and its streams are closed, ending it (and
// what it started) at the timeout: SIGTERM, SIGKILL after the grace, then a last short wait.
CommandResult collectChild(
    const CommandSpec& spec, PendingChild& pending, Fd& outRead, Fd& errRead, Clock::time_point started)
{
    const pid_t pid = pending.pid;
    CommandResult result;
    std::array<Stream, 2> streams { Stream { &outRead, &result.out, &result.outTruncated },
        Stream { &errRead, &result.err, &result.errTruncated } };
    auto killAt = started + spec.timeout; // first SIGTERM, then SIGKILL after the grace
    int killStage = 0;
    bool exited = false;

    for (;;) {
        if (!exited && hasExited(pid)) {
            exited = true;
            // Whatever it left behind gets a grace to finish writing, not the whole timeout.
            killAt = std::min(killAt, Clock::now() + spec.killGrace);
        }
        const bool streamsOpen = outRead.get() >= 0 || errRead.get() >= 0;
        if (exited && (!streamsOpen || killStage > 0))
            break;

        const auto now = Clock::now();
        if (now >= killAt) {
            if (exited) {
                signalChild(pid, SIGKILL, true); // leftovers of a program that itself finished in time
                break;
            }
            result.timedOut = true;
            // A signal the kernel refuses will not be delivered later either: give up at once.
            const bool signalled = killStage == 0 ? signalChild(pid, SIGTERM, true)
                : killStage == 1                  ? signalChild(pid, SIGKILL, true)
                                                  : false;
            if (!signalled) {
                pending.settled = true;
                abandonChild(pid);
                result.abandoned = true;
                result.elapsed = since(started);
                return result;
            }
            killAt = now + (killStage == 0 ? spec.killGrace : killWait);
            ++killStage;
            continue;
        }

        // Wake up at least every 50 ms to notice the child's exit while a grandchild holds the pipes.
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(killAt - now)
            + std::chrono::milliseconds(1);
        wait = std::min(wait, std::chrono::milliseconds(exited ? 50 : 20));
        readStreams(streams, spec.maxOutputBytes, wait);
    }
    // It has exited (seen above): this collects it at once.
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            throwErrno("waitpid");
    pending.settled = true;
    result.elapsed = since(started);
    takeStatus(result, status);
    return result;
}

} // namespace

CommandResult runCommand(const CommandSpec& spec)
{
    if (spec.argv.empty() || spec.argv.front().empty())
        throw std::invalid_argument("runCommand: no program given");
    if (spec.argv.front().front() != '/')
        throw std::invalid_argument("runCommand: the program needs an absolute path: " + spec.argv.front());
    reapAbandonedChildren();

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

    PendingChild pending { pid };
    if (auto late = awaitExec(spec, pending, reportRead, started))
        return *late;
    reportRead.reset();
    return collectChild(spec, pending, outRead, errRead, started);
}

} // namespace baton::slurm
