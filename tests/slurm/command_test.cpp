// The command runner: exit codes, output bounds, timeouts that end the whole process group, the
// explicit environment, and the credential drop of the submission helper.
#include "command.hpp"

#include "process.hpp"

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

} // namespace
