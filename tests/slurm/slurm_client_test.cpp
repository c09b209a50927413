// SlurmClient against a private slurmctld + slurmd: a submission as another user (nobody) carries its
// idempotency key into the queue, and signal, cancel and the stored batch script work on it.
#include "slurm/slurm_client.hpp"

#include "tests/support/services.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

using namespace baton::slurm;
using namespace std::chrono_literals;

namespace {

constexpr uid_t nobody = 65534;

class SlurmClientTest : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        if (getuid() != 0)
            GTEST_SKIP() << "the private cluster needs root";
        cluster_ = new baton::test::SlurmCluster();
        // Submitting users read slurm.conf too; the cluster's directory is root's only by default.
        chmod(cluster_->dir().c_str(), 0755);
    }
    static void TearDownTestSuite()
    {
        delete cluster_;
        cluster_ = nullptr;
    }
    void SetUp() override
    {
        if (!cluster_)
            GTEST_SKIP() << "no cluster";
        SlurmOptions options;
        options.slurmConf = cluster_->slurmConf();
        client_.emplace(options);
        // A directory nobody may write to, as a user's own directory would be.
        ASSERT_EQ(chmod(dir_.path().c_str(), 0777), 0);
    }

    std::filesystem::path writeScript(const std::string& name, const std::string& text)
    {
        const auto path = dir_.path() / name;
        std::ofstream(path) << text;
        chmod(path.c_str(), 0644);
        return path;
    }

    std::optional<QueueJob> waitFor(JobId id, const std::function<bool(const QueueJob&)>& done)
    {
        for (auto deadline = std::chrono::steady_clock::now() + 60s;
             std::chrono::steady_clock::now() < deadline;) {
            if (auto job = client_->jobDetail(id); job && done(*job))
                return job;
            std::this_thread::sleep_for(200ms);
        }
        return client_->jobDetail(id);
    }

    static baton::test::SlurmCluster* cluster_;
    std::optional<SlurmClient> client_;
    baton::test::TempDir dir_ { "baton-slurm-client" };
};

baton::test::SlurmCluster* SlurmClientTest::cluster_ = nullptr;

const std::string loopScript = "#!/bin/bash\n"
                               "trap 'echo got-usr1 >> usr1.txt' USR1\n"
                               "while true; do sleep 0.2; done\n";

TEST_F(SlurmClientTest, SubmitsAsTheOwnerAndTheKeyShowsInTheQueue)
{
    const auto script = writeScript("chain.sh", loopScript);
    SubmitRequest request;
    request.owner = nobody;
    request.key = "baton:chain-1:1";
    request.args = { "--job-name=baton chain", "--time=5", "--nodes=1" };
    request.script = script;
    request.workdir = dir_.path();
    const JobId id = client_->submit(request);
    ASSERT_GT(id, 0);

    const auto snapshot = client_->queue();
    EXPECT_FALSE(snapshot.slurmRelease.empty());
    const auto it = std::find_if(
        snapshot.jobs.begin(), snapshot.jobs.end(), [&](const QueueJob& j) { return j.jobId == id; });
    ASSERT_NE(it, snapshot.jobs.end());
    EXPECT_EQ(it->comment, "baton:chain-1:1");
    EXPECT_EQ(it->userId, nobody);
    EXPECT_EQ(it->name, "baton chain");
    EXPECT_EQ(it->timeLimitMinutes, 5);
    EXPECT_EQ(it->workdir, dir_.path().string());
    EXPECT_TRUE(it->batch);

    const auto running = waitFor(id, [](const QueueJob& j) { return j.state == "RUNNING"; });
    ASSERT_TRUE(running && running->state == "RUNNING") << (running ? running->state : "gone");

    // What a chain started with plain sbatch would resubmit.
    EXPECT_EQ(client_->batchScript(id), loopScript);

    // The batch shell traps USR1 and keeps running.
    std::this_thread::sleep_for(500ms); // let bash install its trap
    client_->signal(id, "USR1", SignalScope::Full);
    const auto marker = dir_.path() / "usr1.txt";
    for (int i = 0; i < 100 && !std::filesystem::exists(marker); ++i)
        std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(std::filesystem::exists(marker));
    EXPECT_EQ(client_->jobDetail(id)->state, "RUNNING");

    client_->cancel(id);
    const auto ended = waitFor(id, [](const QueueJob& j) { return j.state == "CANCELLED"; });
    ASSERT_TRUE(ended);
    EXPECT_EQ(ended->state, "CANCELLED");
    EXPECT_NO_THROW(client_->cancel(id)); // cancelling again is harmless
}

TEST_F(SlurmClientTest, SignalTermAsTheOwnerEndsTheJob)
{
    const auto script = writeScript("term.sh", "#!/bin/bash\nsleep 300\n");
    const JobId id = client_->submit({ nobody, "baton:chain-2:1", { "--time=2" }, script, dir_.path(), {}, std::nullopt });
    ASSERT_TRUE(waitFor(id, [](const QueueJob& j) { return j.state == "RUNNING"; }));
    // batond controls a job as its owner: another user may not, the owner may.
    const uid_t daemonUid = 1;
    EXPECT_THROW(client_->signal(id, "TERM", SignalScope::Full, daemonUid), SlurmError);
    EXPECT_THROW(client_->cancel(id, daemonUid), SlurmError);
    EXPECT_THROW(client_->batchScript(id, daemonUid), SlurmError);
    EXPECT_EQ(client_->batchScript(id, nobody), "#!/bin/bash\nsleep 300\n");
    EXPECT_EQ(client_->jobDetail(id)->state, "RUNNING");
    client_->signal(id, "TERM", SignalScope::Full, nobody);
    const auto ended = waitFor(id, [](const QueueJob& j) { return !j.active() && !j.pending(); });
    ASSERT_TRUE(ended);
    EXPECT_NE(ended->state, "RUNNING");
}

// A training under srun gets its handover TERM through the steps only. `--full` reaches srun too, and
// srun answers TERM by force-terminating its step (the tasks then have KillWait seconds before SIGKILL,
// whatever their final checkpoint needs); the step scope leaves srun alone and the job completes.
TEST_F(SlurmClientTest, StepScopeSparesSrunSoTheTrainingEndsOnItsOwn)
{
    const auto run = [&](SignalScope scope, const std::string& tag) {
        // The step's task traps TERM and takes a second to "write its final checkpoint".
        const auto script = writeScript(tag + ".sh",
            "#!/bin/bash\n"
            "srun --ntasks=1 bash -c 'trap \"sleep 1; echo saved > saved-"
                + tag + ".txt; exit 0\" TERM; touch ready-" + tag
                + ".txt; while true; do sleep 0.1; done'\n");
        const JobId id = client_->submit({ nobody, "baton:chain-3:" + tag,
            { "--time=2", "--output=" + tag + ".out" }, script, dir_.path(), {}, std::nullopt });
        const auto ready = dir_.path() / ("ready-" + tag + ".txt");
        for (int i = 0; i < 600 && !std::filesystem::exists(ready); ++i)
            std::this_thread::sleep_for(100ms);
        EXPECT_TRUE(std::filesystem::exists(ready)) << "the step did not start";
        client_->signal(id, "TERM", scope, nobody);
        const auto ended = waitFor(id, [](const QueueJob& j) { return !j.active() && !j.pending(); });
        EXPECT_TRUE(ended && !ended->active()) << "job " << id << " still running";
        std::ifstream in(dir_.path() / (tag + ".out"));
        std::stringstream output;
        output << in.rdbuf();
        return std::make_tuple(std::filesystem::exists(dir_.path() / ("saved-" + tag + ".txt")),
            ended ? ended->state : std::string("gone"), output.str());
    };
    const auto [stepsSaved, stepsState, stepsOutput] = run(SignalScope::Steps, "steps");
    EXPECT_TRUE(stepsSaved) << stepsOutput;
    EXPECT_EQ(stepsState, "COMPLETED") << stepsOutput;
    EXPECT_EQ(stepsOutput.find("forcing job termination"), std::string::npos) << stepsOutput;
    const auto [fullSaved, fullState, fullOutput] = run(SignalScope::Full, "full");
    EXPECT_NE(fullOutput.find("forcing job termination"), std::string::npos)
        << "srun no longer force-terminates its step on TERM; --full would do for srun steps too:\n"
        << fullOutput;
}

// A script given as text reaches sbatch on standard input: no file of it exists for anyone to read.
TEST_F(SlurmClientTest, ScriptTextIsSubmittedFromStandardInput)
{
    SubmitRequest request;
    request.owner = nobody;
    request.key = "baton:chain-5:1";
    request.args = { "--time=5" };
    request.workdir = dir_.path();
    request.scriptText = loopScript;
    const JobId id = client_->submit(request);
    ASSERT_GT(id, 0);
    const auto running = waitFor(id, [](const QueueJob& j) { return j.state == "RUNNING"; });
    ASSERT_TRUE(running);
    EXPECT_EQ(running->userId, nobody);
    EXPECT_EQ(client_->batchScript(id), loopScript);
    client_->cancel(id);
}

TEST_F(SlurmClientTest, FailuresSayWhatSlurmSaid)
{
    const auto script = writeScript("ok.sh", "#!/bin/bash\ntrue\n");
    try {
        client_->submit(
            { nobody, "baton:chain-3:1", { "--partition=no-such-partition" }, script, dir_.path(), {}, std::nullopt });
        FAIL() << "expected an error";
    } catch (const SlurmError& e) {
        EXPECT_NE(e.command().find("--partition=no-such-partition"), std::string::npos) << e.command();
        EXPECT_NE(e.detail().find("partition"), std::string::npos) << e.detail();
    }
    EXPECT_THROW(client_->batchScript(99999999), SlurmError);
    EXPECT_THROW(client_->signal(99999999, "TERM"), SlurmError);
    EXPECT_FALSE(client_->jobDetail(99999999).has_value());
    EXPECT_THROW(client_->submit({ nobody, "k", { "--comment=other" }, script, dir_.path(), {}, std::nullopt }),
        std::invalid_argument);
    EXPECT_THROW(client_->signal(1, "TERM; rm"), std::invalid_argument);
    // nobody may not write into a directory of root's.
    baton::test::TempDir closed("baton-closed");
    chmod(closed.path().c_str(), 0700);
    EXPECT_THROW(client_->submit({ nobody, "baton:chain-4:1", {}, script, closed.path(), {}, std::nullopt }), SlurmError);
}

TEST_F(SlurmClientTest, CountsTheUsableNodes)
{
    EXPECT_EQ(client_->usableNodes(), 1);
}

} // namespace
