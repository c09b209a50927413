// The command runner: exit codes, output bounds, timeouts that end the whole process group, the
// explicit environment, and the credential drop of the submission helper.
#include "slurm/command.hpp"

#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <thread>

using namespace baton::slurm;
using namespace std::chrono_literals;

namespace {

std::string sh()
{
    auto p = findProgram("sh", "/usr/bin:/bin");
    if (!p)
        throw std::runtime_error("no sh");
    return p->string();
}

CommandSpec script(const std::string& body)
{
    CommandSpec spec;
    spec.argv = { sh(), "-c", body };
    return spec;
}

TEST(Command, ReportsExitStatusAndSeparatesStreams)
{
    const auto r = runCommand(script("echo out; echo err >&2; exit 3"));
    EXPECT_EQ(r.exitCode, 3);
    EXPECT_EQ(r.termSignal, 0);
    EXPECT_FALSE(r.timedOut);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.out, "out\n");
    EXPECT_EQ(r.err, "err\n");
    EXPECT_EQ(r.describe(), "exit status 3");
}

TEST(Command, ReportsTheSignalThatEndedIt)
{
    const auto r = runCommand(script("kill -KILL $$"));
    EXPECT_EQ(r.exitCode, -1);
    EXPECT_EQ(r.termSignal, 9);
    EXPECT_NE(r.describe().find("signal 9"), std::string::npos);
}

TEST(Command, PassesArgumentsVerbatimWithoutAShell)
{
    CommandSpec spec;
    spec.argv = { sh(), "-c", "printf '%s|' \"$@\"", "zero", "a b", "$(id)", "';x" };
    const auto r = runCommand(spec);
    ASSERT_TRUE(r.ok()) << r.err;
    EXPECT_EQ(r.out, "a b|$(id)|';x|");
}

TEST(Command, BoundsTheOutputAndStillDrainsIt)
{
    auto spec = script("head -c 1000000 /dev/zero; echo done >&2");
    spec.maxOutputBytes = 1000;
    const auto r = runCommand(spec);
    EXPECT_TRUE(r.ok()); // the child was never blocked on a full pipe
    EXPECT_EQ(r.out.size(), 1000u);
    EXPECT_TRUE(r.outTruncated);
    EXPECT_EQ(r.err, "done\n");
    EXPECT_FALSE(r.errTruncated);
}

TEST(Command, TimeoutEndsTheWholeProcessGroup)
{
    baton::test::TempDir dir;
    const auto marker = dir.path() / "grandchild-alive";
    // The grandchild ignores nothing and would touch the marker after 3 s if it survived.
    auto spec = script("(sleep 3; touch '" + marker.string() + "') & sleep 30");
    spec.timeout = 300ms;
    spec.killGrace = 200ms;
    const auto started = std::chrono::steady_clock::now();
    const auto r = runCommand(spec);
    EXPECT_TRUE(r.timedOut);
    EXPECT_FALSE(r.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
    EXPECT_NE(r.describe().find("timed out"), std::string::npos);
    std::this_thread::sleep_for(3500ms);
    EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Command, TermIgnoredMeansKill)
{
    auto spec = script("trap '' TERM; echo ready; sleep 30");
    spec.timeout = 300ms;
    spec.killGrace = 300ms;
    const auto started = std::chrono::steady_clock::now();
    const auto r = runCommand(spec);
    EXPECT_TRUE(r.timedOut);
    EXPECT_EQ(r.termSignal, 9);
    EXPECT_EQ(r.out, "ready\n");
    EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST(Command, LeftoverBackgroundChildDoesNotHoldUsUntilTheTimeout)
{
    auto spec = script("sleep 30 & echo parent-done");
    spec.timeout = 20s;
    spec.killGrace = 300ms;
    const auto started = std::chrono::steady_clock::now();
    const auto r = runCommand(spec);
    EXPECT_TRUE(r.ok());
    EXPECT_FALSE(r.timedOut);
    EXPECT_EQ(r.out, "parent-done\n");
    EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

TEST(Command, ChildSeesOnlyTheGivenEnvironment)
{
    setenv("BATON_SECRET_OF_THE_PARENT", "x", 1);
    CommandSpec spec;
    spec.argv = { findProgram("env", "/usr/bin:/bin")->string() };
    spec.env = { "ONLY=this", "PATH=/nowhere" };
    const auto r = runCommand(spec);
    ASSERT_TRUE(r.ok()) << r.err;
    EXPECT_EQ(r.out.find("BATON_SECRET_OF_THE_PARENT"), std::string::npos);
    EXPECT_NE(r.out.find("ONLY=this\n"), std::string::npos);
    EXPECT_NE(r.out.find("PATH=/nowhere\n"), std::string::npos);
}

TEST(Command, RunsInTheWorkingDirectory)
{
    baton::test::TempDir dir;
    auto spec = script("pwd");
    spec.workdir = dir.path();
    const auto r = runCommand(spec);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.out, std::filesystem::canonical(dir.path()).string() + "\n");
}

TEST(Command, DoesNotLeakOurDescriptors)
{
    baton::test::TempDir dir;
    const int opened = ::open((dir.path() / "f").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(opened, 0);
    const int fd = fcntl(opened, F_DUPFD, 50); // not close-on-exec, and above what sh opens itself
    ::close(opened);
    ASSERT_GE(fd, 50);
    const auto r
        = runCommand(script("if [ -e /proc/$$/fd/" + std::to_string(fd) + " ]; then echo leaked; fi"));
    ::close(fd);
    ASSERT_TRUE(r.ok()) << r.err;
    EXPECT_EQ(r.out, "");
}

TEST(Command, FailuresToStartAreErrorsNotResults)
{
    CommandSpec missing;
    missing.argv = { "/nonexistent/program" };
    EXPECT_THROW(runCommand(missing), std::system_error);
    auto badDir = script("true");
    badDir.workdir = "/nonexistent/dir";
    try {
        runCommand(badDir);
        FAIL() << "expected an error";
    } catch (const std::system_error& e) {
        EXPECT_NE(std::string(e.what()).find("working directory"), std::string::npos) << e.what();
    }
    CommandSpec relative;
    relative.argv = { "sh" };
    EXPECT_THROW(runCommand(relative), std::invalid_argument);
}

TEST(Command, FindsProgramsInASearchPath)
{
    EXPECT_TRUE(findProgram("sh", "relative:/usr/bin:/bin").has_value());
    EXPECT_FALSE(findProgram("no-such-program-anywhere", "/usr/bin:/bin").has_value());
    EXPECT_FALSE(findProgram("sh", "relative/only").has_value());
}

TEST(Command, FormatsArgvForMessages)
{
    EXPECT_EQ(formatArgv({ "/bin/sbatch", "--comment=baton:x:1", "a b", "it's" }),
        "/bin/sbatch --comment=baton:x:1 'a b' 'it'\\''s'");
}

TEST(Command, DropsToNobody)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to change credentials";
    CommandSpec spec;
    spec.argv = { findProgram("id", "/usr/bin:/bin")->string() };
    spec.credentials = Credentials { 65534, 65534, {} };
    const auto r = runCommand(spec);
    ASSERT_TRUE(r.ok()) << r.err;
    EXPECT_EQ(r.out.substr(0, r.out.find(' ')), "uid=65534(nobody)");
    EXPECT_NE(r.out.find("gid=65534("), std::string::npos) << r.out;
    // No supplementary group of root's survived.
    EXPECT_EQ(r.out.find("0(root)"), std::string::npos) << r.out;
}

TEST(Command, DroppedChildCannotRegainRoot)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to change credentials";
    auto spec = script("id -u; id -G; touch /root/.baton-should-not-exist 2>/dev/null && echo wrote");
    spec.env = { "PATH=/usr/bin:/bin" };
    spec.credentials = Credentials { 65534, 65534, { 65534 } };
    const auto r = runCommand(spec);
    EXPECT_EQ(r.out, "65534\n65534\n");
    std::filesystem::remove("/root/.baton-should-not-exist");
}

TEST(Command, WorkdirIsEnteredAsTheUser)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to change credentials";
    baton::test::TempDir dir;
    ASSERT_EQ(chmod(dir.path().c_str(), 0700), 0); // root's only
    auto spec = script("pwd");
    spec.workdir = dir.path();
    spec.credentials = Credentials { 65534, 65534, {} };
    EXPECT_THROW(runCommand(spec), std::system_error);
}

// batond's systemd unit runs it as a non-root user holding CAP_SETUID and CAP_SETGID as ambient
// capabilities. Such a process keeps its capabilities across setuid (only a change away from uid 0
// clears them), so the helper must drop them itself: the program it runs has none, ambient included,
// and cannot become root again.
TEST(Command, ServiceUserWithCapabilitiesDropsThemAll)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to set up a capability-holding service user";
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // As systemd sets up User=daemon with AmbientCapabilities=CAP_SETUID CAP_SETGID.
        constexpr unsigned caps = (1U << CAP_SETUID) | (1U << CAP_SETGID);
        __user_cap_header_struct header { _LINUX_CAPABILITY_VERSION_3, 0 };
        __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] {};
        data[0].effective = data[0].permitted = data[0].inheritable = caps;
        if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 || setgroups(0, nullptr) != 0 || setresgid(1, 1, 1) != 0
            || setresuid(1, 1, 1) != 0 || syscall(SYS_capset, &header, data) != 0
            || prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETUID, 0, 0) != 0
            || prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETGID, 0, 0) != 0) {
            std::perror("setting up the service user");
            _exit(2);
        }
        try {
            auto spec = script("grep -E '^(Uid|Gid|CapPrm|CapEff|CapAmb):' /proc/self/status");
            spec.env = { "PATH=/usr/bin:/bin" };
            spec.credentials = Credentials { 65534, 65534, { 65534 } };
            const auto r = runCommand(spec);
            const std::string expected = "Uid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\n"
                                         "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
                                         "CapAmb:\t0000000000000000\n";
            if (!r.ok() || r.out != expected) {
                std::fprintf(stderr, "got (%s):\n%s%s", r.describe().c_str(), r.out.c_str(), r.err.c_str());
                _exit(1);
            }
            // A Slurm client run as the service user itself (squeue) does not inherit its capabilities.
            spec.credentials.reset();
            const auto own = runCommand(spec);
            const std::string expectedOwn = "Uid:\t1\t1\t1\t1\nGid:\t1\t1\t1\t1\n"
                                            "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
                                            "CapAmb:\t0000000000000000\n";
            if (!own.ok() || own.out != expectedOwn) {
                std::fprintf(stderr, "without credentials (%s):\n%s%s", own.describe().c_str(),
                    own.out.c_str(), own.err.c_str());
                _exit(1);
            }
        } catch (const std::exception& error) {
            std::fprintf(stderr, "runCommand: %s\n", error.what());
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the dropped program kept capabilities or could not start";
}

// batond under a unit without CAP_KILL: it may not signal a child that has switched to the chain
// owner's uid. Runs `body` in a forked process that has lost CAP_KILL from every set (so it cannot come
// back) and a 10 s alarm (a caller blocked on the child dies of it instead of hanging the test). The
// body returns its exit status (0: passed) and may write one pid to `reportFd`: a process the parent
// kills afterwards, as root that can, and collects (this process becomes the subreaper of what the
// forked one leaves). Returns a failure message, or an empty string when it passed.
std::string withoutCapKill(const std::function<int(int reportFd)>& body)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    int fds[2];
    if (pipe(fds) != 0)
        return "pipe failed";
    const pid_t child = fork();
    if (child < 0)
        return "fork failed";
    if (child == 0) {
        close(fds[0]);
        __user_cap_header_struct header { _LINUX_CAPABILITY_VERSION_3, 0 };
        __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] {};
        if (syscall(SYS_capget, &header, data) != 0 || prctl(PR_CAPBSET_DROP, CAP_KILL, 0, 0, 0) != 0) {
            std::perror("capget/PR_CAPBSET_DROP");
            _exit(2);
        }
        constexpr unsigned kill = 1U << CAP_KILL;
        data[0].effective &= ~kill;
        data[0].permitted &= ~kill;
        data[0].inheritable &= ~kill;
        if (syscall(SYS_capset, &header, data) != 0) {
            std::perror("capset");
            _exit(2);
        }
        alarm(10);
        int status = 1;
        try {
            status = body(fds[1]);
        } catch (const std::exception& error) {
            std::fprintf(stderr, "%s\n", error.what());
        }
        _exit(status);
    }
    close(fds[1]);
    pid_t leftover = 0;
    [[maybe_unused]] auto n = read(fds[0], &leftover, sizeof leftover);
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (leftover > 0) {
        if (kill(-leftover, SIGKILL) == 0)
            while (waitpid(-leftover, nullptr, 0) > 0) { }
        else if (kill(leftover, SIGKILL) == 0)
            waitpid(leftover, nullptr, 0);
    }
    if (WIFSIGNALED(status))
        return "the caller was blocked (killed by signal " + std::to_string(WTERMSIG(status)) + ")";
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return "failed with status " + std::to_string(status);
    return "";
}

void reportPid(int fd, pid_t pid)
{
    [[maybe_unused]] auto n = write(fd, &pid, sizeof pid);
}

// A child that ignores SIGTERM, or that its owner stopped with SIGSTOP, as another uid: batond cannot
// signal it at all. runCommand gives it up (left to the reaper) and returns a timeout soon after the
// timeout instead of waiting for it forever. The old runner sent signals the kernel refused and kept
// waiting: the 10 s alarm ended the caller.
TEST(Command, ChildThatCannotBeKilledDoesNotHoldTheCaller)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to change credentials";
    for (const char* body : { "echo $$; trap '' TERM; sleep 30", "echo $$; kill -STOP $$; sleep 30" }) {
        const std::string failure = withoutCapKill([&](int reportFd) {
            auto spec = script(body);
            spec.env = { "PATH=/usr/bin:/bin" };
            spec.credentials = Credentials { 65534, 65534, { 65534 } };
            spec.timeout = 300ms;
            spec.killGrace = 300ms;
            const auto before = abandonedChildren();
            const auto started = std::chrono::steady_clock::now();
            const auto r = runCommand(spec);
            const auto took = std::chrono::steady_clock::now() - started;
            if (!r.out.empty())
                reportPid(reportFd, static_cast<pid_t>(std::stol(r.out)));
            if (!r.timedOut || !r.abandoned || r.ok() || took > 2s) {
                std::fprintf(stderr, "%s after %lld ms\n", r.describe().c_str(),
                    static_cast<long long>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
                return 1;
            }
            if (r.describe().find("could not be ended") == std::string::npos)
                return 1;
            // Counted, and still outstanding: the reaper collects it once it ends, later.
            return abandonedChildren() == before + 1 && reapAbandonedChildren() == 1 ? 0 : 1;
        });
        EXPECT_EQ(failure, "") << body;
    }
}

// The same without the refusal: batond with CAP_KILL ends a stopped child of another uid with SIGKILL.
TEST(Command, StoppedChildOfAnotherUserIsKilled)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to change credentials";
    auto spec = script("kill -STOP $$; sleep 30");
    spec.env = { "PATH=/usr/bin:/bin" };
    spec.credentials = Credentials { 65534, 65534, { 65534 } };
    spec.timeout = 300ms;
    spec.killGrace = 300ms;
    const auto r = runCommand(spec);
    EXPECT_TRUE(r.timedOut);
    EXPECT_FALSE(r.abandoned);
    EXPECT_EQ(r.termSignal, SIGKILL);
    EXPECT_LT(r.elapsed, 2s);
}

// awaitChild, the wait of the spool collector (a child that reads files as the owner and execs nothing):
// an exit is collected, a child that is killable is killed at the deadline, one that is not is
// abandoned at the deadline.
TEST(Command, AwaitChildNeverWaitsPastTheGrace)
{
    const pid_t quick = fork();
    ASSERT_GE(quick, 0);
    if (quick == 0)
        _exit(3);
    auto status = awaitChild(quick, std::chrono::steady_clock::now() + 5s, 500ms, false);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3);

    const pid_t stuck = fork();
    ASSERT_GE(stuck, 0);
    if (stuck == 0) {
        raise(SIGSTOP);
        _exit(0);
    }
    status = awaitChild(stuck, std::chrono::steady_clock::now() + 200ms, 500ms, false);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);

    if (getuid() != 0)
        GTEST_SKIP() << "needs root to change credentials";
    const std::string failure = withoutCapKill([](int reportFd) {
        const pid_t owners = fork();
        if (owners < 0)
            return 1;
        if (owners == 0) {
            if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
                _exit(9);
            raise(SIGSTOP); // as an owner may do to the collector
            _exit(0);
        }
        reportPid(reportFd, owners);
        const auto before = abandonedChildren();
        const auto started = std::chrono::steady_clock::now();
        const auto got = awaitChild(owners, started + 200ms, 500ms, false);
        const auto took = std::chrono::steady_clock::now() - started;
        if (got || took > 1s)
            return 1;
        return abandonedChildren() == before + 1 && reapAbandonedChildren() == 1 ? 0 : 1;
    });
    EXPECT_EQ(failure, "");
}

} // namespace
