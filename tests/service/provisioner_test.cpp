// The chain state machine against a real PostgreSQL and a scripted cluster (a fake of Slurm, in
// addition to the real-Slurm tests in batond_test): crash windows around sbatch, the retry budget, the
// end of training, handover bookkeeping.
#include "service/chain_views.hpp"
#include "service/live_chains.hpp"
#include "service/live_policy.hpp"
#include "service/provisioner.hpp"
#include "tests/support/services.hpp"

#include "common/baton_contract.hpp"
#include "db/migrations.hpp"
#include "policy/model_store.hpp"
#include "policy/policy.hpp"

#include <gtest/gtest.h>

#include <ctime>
#include <set>

namespace {

using namespace baton::service;
using Json = nlohmann::json;

// A queue the test writes; submissions become pending jobs carrying their comment.
class ScriptedCluster final : public Cluster {
public:
    static inline std::int64_t nextFreeId = 0;
    ClusterQueue queue() override
    {
        ClusterQueue snapshot;
        snapshot.squeue.takenAt = now;
        snapshot.jobs = jobs;
        return snapshot;
    }
    std::int64_t submit(const SubmitRequest& request) override
    {
        submissions.push_back(request);
        ClusterJob job;
        job.id = nextId++;
        job.userId = static_cast<std::int64_t>(request.owner);
        job.state = "PENDING";
        job.comment = request.key;
        job.submitTime = now;
        job.timeLimitSeconds = 3600;
        jobs.push_back(job);
        if (failAfterSubmit)
            throw std::runtime_error("batond killed right after sbatch");
        if (timeoutAfterAccept) // slurmctld took the job, but its answer never came back
            throw SlurmError("sbatch", "timed out");
        return job.id;
    }
    void signal(std::int64_t jobId, const std::string& name, SignalScope scope, std::int64_t) override
    {
        if (failingSignals > 0) {
            --failingSignals;
            throw SlurmError("scancel", "slurmctld did not answer");
        }
        signals.push_back({ jobId, name, scope });
    }
    void cancel(std::int64_t jobId, std::int64_t) override
    {
        if (uncancellable.contains(jobId))
            throw SlurmError("scancel", "Access/permission denied");
        cancelled.push_back(jobId);
        if (ClusterJob* job = find(jobId); job && !job->ended()) {
            // As slurmctld does: a job cancelled while pending gets its start set to its end.
            if (job->startTime == 0)
                job->startTime = now;
            job->state = "CANCELLED";
            job->endTime = now;
        }
    }
    std::string batchScript(std::int64_t, std::int64_t) override { return "#!/bin/bash\ntrain\n"; }

    ClusterJob* find(std::int64_t id)
    {
        for (auto& job : jobs)
            if (job.id == id)
                return &job;
        return nullptr;
    }
    void start(std::int64_t id)
    {
        find(id)->state = "RUNNING";
        find(id)->startTime = now;
    }
    void end(std::int64_t id, const std::string& state)
    {
        find(id)->state = state;
        find(id)->endTime = now;
    }

    std::int64_t now = std::time(nullptr); // the database clock stamps intents
    std::int64_t nextId = nextFreeId += 100; // Slurm never reuses a job id; the tests share a database
    bool failAfterSubmit = false;
    bool timeoutAfterAccept = false;
    int failingSignals = 0;
    std::set<std::int64_t> uncancellable;
    std::vector<ClusterJob> jobs;
    std::vector<SubmitRequest> submissions;
    struct Signal {
        std::int64_t jobId;
        std::string name;
        SignalScope scope;
        bool operator==(const Signal&) const = default;
    };
    std::vector<Signal> signals;
    std::vector<std::int64_t> cancelled;
};

// Submits whenever asked: the tests drive timing through the queue, not the policy.
class AlwaysSubmit final : public baton::sim::Policy {
public:
    std::string name() const override { return "always"; }
    std::size_t firstSubmit(std::span<const baton::sim::DecisionPoint>) const override { return 0; }
};

class ProvisionerTest : public testing::Test {
protected:
    static void SetUpTestSuite() { server_ = new baton::test::PostgresServer(); }
    static void TearDownTestSuite() { delete server_; }

    // Each test gets a database of its own.
    static std::string freshDatabase()
    {
        static int count = 0;
        const std::string conninfo = server_->createDatabase("provisioner" + std::to_string(++count));
        baton::db::Connection connection(conninfo);
        baton::db::migrate(connection);
        return conninfo;
    }

    ProvisionerTest()
        : conninfo_(freshDatabase())
        , connection_(conninfo_)
        , store_(connection_)
    {
        config_.retryBudget = 2;
        config_.submitGrace = std::chrono::seconds(30);
    }

    // A chain named after the test (and `suffix`) whose first job (running) came from plain sbatch.
    ChainRow chainWithRunningJob(std::int64_t jobId, const std::string& suffix = "")
    {
        ClusterJob first;
        first.id = jobId;
        first.userId = 65534;
        first.state = "RUNNING";
        first.submitTime = first.startTime = cluster_.now - 60;
        first.timeLimitSeconds = 3600;
        cluster_.jobs.push_back(first);
        const std::string name = testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
        const ChainRow chain = store_.chains.create(65534, "nobody", name, "/chains/" + name,
            Json { { "script", "#!/bin/bash\ntrain\n" }, { "sbatch_args", Json::array() },
                { "workdir", "/tmp" } });
        store_.jobs.upsert(chain.id, 0, first);
        return chain;
    }
    void tick(
        std::shared_ptr<const baton::sim::Policy> policy = std::make_shared<baton::sim::ReactivePolicy>())
    {
        Provisioner provisioner(config_, store_, cluster_, metrics_, policy, timeOnlyDecisionPoints);
        provisioner.tick();
    }
    ChainState stateOf(const ChainRow& chain) { return store_.chains.find(chain.id)->state; }
    // Puts a chain in a state for a test's set-up, whether or not the state machine leads there.
    bool forceState(std::int64_t chainId, ChainState from, ChainState to)
    {
        static constexpr baton::db::Statement force { "test_force_state",
            "UPDATE chains SET state = $2 WHERE id = $1 AND state = $3" };
        return connection_.exec(force, baton::db::Params(chainId, nameOf(to), nameOf(from))).affected() == 1;
    }

    static baton::test::PostgresServer* server_;
    ServiceConfig config_;
    const std::string conninfo_;
    baton::db::Connection connection_;
    Store store_;
    ScriptedCluster cluster_;
    Metrics metrics_;
};

baton::test::PostgresServer* ProvisionerTest::server_ = nullptr;

TEST_F(ProvisionerTest, HandoverThenAdvance)
{
    const ChainRow chain = chainWithRunningJob(1);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(cluster_.submissions[0].key, Submitter::submissionKey(chain, 1));
    EXPECT_EQ(cluster_.submissions[0].args.front(), "--baton=" + chain.name);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    tick(std::make_shared<AlwaysSubmit>()); // nothing new while the successor waits
    EXPECT_EQ(cluster_.submissions.size(), 1u);

    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    ASSERT_EQ(cluster_.signals.size(), 1u);
    // No step reports: the training is taken to run in the batch step, reached through --full.
    EXPECT_EQ(cluster_.signals[0], (ScriptedCluster::Signal { 1, "TERM", SignalScope::Full }));
    tick(); // still running: no second signal
    EXPECT_EQ(cluster_.signals.size(), 1u);

    cluster_.now += 7;
    cluster_.end(1, "COMPLETED");
    tick();
    const ChainRow after = *store_.chains.find(chain.id);
    EXPECT_EQ(after.state, ChainState::Running);
    EXPECT_EQ(after.seq, 1);
    EXPECT_EQ(after.generation, 0);
    const Json detail = ChainViews(connection_).detail(after);
    ASSERT_EQ(detail["handovers"].size(), 1u);
    EXPECT_DOUBLE_EQ(detail["handovers"][0]["handover_s"].get<double>(), 7.0);
    EXPECT_EQ(detail["jobs"][1]["interruption_s"], -7); // the successor started 7 s before the end
}

// srun answers TERM by force-terminating its step: a predecessor whose training runs
// under srun is signalled through its steps only, which spares srun.
TEST_F(ProvisionerTest, HandoverSignalsOnlyTheStepsOfATrainingUnderSrun)
{
    const ChainRow chain = chainWithRunningJob(1);
    const auto report = [&](const std::string& kind, const std::string& step, const Json& requeue) {
        static int count = 0;
        store_.events.insert("key-" + std::to_string(++count), kind, chain.name, 1,
            Json { { "step", step }, { "requeue_count", requeue } }, 0);
    };
    report("step_start", "batch", 0);
    EXPECT_EQ(store_.events.checkpointSignalScope(1), SignalScope::Full) << "training in the batch step";
    report("step_start", "0", 0);
    report("task_exit", "0", 0);
    EXPECT_EQ(store_.events.checkpointSignalScope(1), SignalScope::Full) << "the srun step has ended";
    report("step_start", "1", "not a number"); // a hint: read as the first run
    EXPECT_EQ(store_.events.checkpointSignalScope(1), SignalScope::Steps) << "an srun step runs";
    report("step_start", "batch", 1);
    EXPECT_EQ(store_.events.checkpointSignalScope(1), SignalScope::Full) << "requeued: the first run's steps ended";
    report("step_start", "0", 1);
    EXPECT_EQ(store_.events.checkpointSignalScope(1), SignalScope::Steps);
    EXPECT_EQ(store_.events.checkpointSignalScope(2), SignalScope::Full) << "another job";

    tick(std::make_shared<AlwaysSubmit>());
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    ASSERT_EQ(cluster_.signals.size(), 1u);
    EXPECT_EQ(cluster_.signals[0], (ScriptedCluster::Signal { 1, "TERM", SignalScope::Steps }));
    EXPECT_EQ(ChainViews(connection_).detail(*store_.chains.find(chain.id))["decisions"][0]["outcome"], // the newest first
        "predecessor signalled TERM (steps)");
}

// A tick's submissions are recorded in one statement: the intents become submitted jobs and the
// policy's predictions are kept for the successors' real waits.
TEST_F(ProvisionerTest, SubmittedJobsAndTheirPredictionsAreRecordedTogether)
{
    const ChainRow first = chainWithRunningJob(1);
    const std::string key = Submitter::submissionKey(first, 1);
    ASSERT_EQ(
        store_.submissions.recordIntents({ IntentRequest { first.id, ChainState::Running, 1, key, "policy" } }).size(),
        1u);
    store_.submissions.recordSubmitted({});
    EXPECT_EQ(store_.submissions.find(first.id, 1)->state, "intent");
    store_.submissions.recordSubmitted({ SubmittedJob { key, first.id, 77, 120.0 } });
    const auto submitted = store_.submissions.find(first.id, 1);
    EXPECT_EQ(submitted->state, "submitted");
    EXPECT_EQ(submitted->slurmJobId, 77);
    EXPECT_EQ(store_.submissions.resolvePrediction(77, 100.0), 120.0);
    EXPECT_EQ(store_.submissions.resolvePrediction(77, 100.0), std::nullopt) << "resolved once";
}

TEST_F(ProvisionerTest, CrashAfterSbatchIsReconciledNotResubmitted)
{
    const ChainRow chain = chainWithRunningJob(2);
    cluster_.failAfterSubmit = true; // sbatch ran, but its job id was never written down
    EXPECT_NO_THROW(tick(std::make_shared<AlwaysSubmit>()));
    cluster_.failAfterSubmit = false;
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    const auto pending = store_.submissions.find(chain.id, 1);
    ASSERT_TRUE(pending);
    EXPECT_NE(pending->state, "submitted");

    // The next tick (a restarted batond) finds the job by its key in the queue.
    cluster_.now += 1;
    tick(std::make_shared<AlwaysSubmit>());
    EXPECT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(store_.submissions.find(chain.id, 1)->state, "submitted");
    EXPECT_EQ(store_.submissions.find(chain.id, 1)->slurmJobId, cluster_.jobs.back().id);
}

TEST_F(ProvisionerTest, IntentWithoutJobIsSubmittedOnceAfterTheGrace)
{
    const ChainRow chain = chainWithRunningJob(3);
    // batond died between writing the intent and running sbatch.
    ASSERT_TRUE(forceState(chain.id, ChainState::Running, ChainState::SuccessorPending));
    ASSERT_TRUE(store_.submissions.recordIntent(chain.id, 1, Submitter::submissionKey(chain, 1), "policy"));
    tick();
    EXPECT_TRUE(cluster_.submissions.empty()); // within the grace, a submission may still be in flight
    cluster_.now += 3600;
    cluster_.find(3)->startTime = cluster_.now - 60; // keep the predecessor running
    tick();
    tick();
    EXPECT_EQ(cluster_.submissions.size(), 1u);
}

TEST_F(ProvisionerTest, FailuresWithoutProgressSpendTheRetryBudget)
{
    const ChainRow chain = chainWithRunningJob(4);
    cluster_.end(4, "FAILED");
    tick();
    EXPECT_TRUE(cluster_.submissions.empty()) << "the job's last report may still be on its way";
    std::int64_t failing = 4;
    for (int attempt = 0; attempt < 2; ++attempt) {
        cluster_.now += 30; // a tick period after the end
        tick();
        ASSERT_EQ(cluster_.submissions.size(), static_cast<std::size_t>(attempt + 1));
        EXPECT_EQ(store_.submissions.find(chain.id, attempt + 1)->reason, "retry");
        failing = cluster_.jobs.back().id;
        cluster_.start(failing);
        tick();
        EXPECT_EQ(stateOf(chain), ChainState::Running);
        cluster_.end(failing, "FAILED");
    }
    cluster_.now += 30;
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Failed);
    EXPECT_NE(store_.chains.find(chain.id)->reason->find("without a checkpoint; retry budget of 2 spent"),
        std::string::npos);
    EXPECT_EQ(cluster_.submissions.size(), 2u);
}

// A node that fails under a job is not the chain's fault: its successor spends no retry, and restores
// without waiting for a final checkpoint that nobody can write any more. A job that was itself that
// successor and loses its node again without a checkpoint does spend one.
TEST_F(ProvisionerTest, ANodeFailureSpendsNoRetryAndItsSuccessorWaitsForNoHandover)
{
    const ChainRow chain = chainWithRunningJob(5);
    cluster_.end(5, "NODE_FAIL");
    cluster_.now += 30;
    tick();
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(store_.submissions.find(chain.id, 1)->reason, "node_failure");
    EXPECT_EQ(store_.chains.find(chain.id)->retries, 0);
    EXPECT_EQ(cluster_.submissions[0].args.back(), "--baton-handover-wait=0");

    const std::int64_t second = cluster_.jobs.back().id;
    cluster_.start(second);
    tick();
    cluster_.end(second, "NODE_FAIL");
    cluster_.now += 30;
    tick();
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_EQ(store_.submissions.find(chain.id, 2)->reason, "retry");
    EXPECT_EQ(store_.chains.find(chain.id)->retries, 1);
    EXPECT_EQ(cluster_.submissions[1].args.back(), "--baton-handover-wait=0");
}

// A successor submitted while its predecessor runs waits for the handover checkpoint as configured.
TEST_F(ProvisionerTest, AnEarlySuccessorKeepsTheHandoverWait)
{
    chainWithRunningJob(6);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    for (const auto& arg : cluster_.submissions[0].args)
        EXPECT_EQ(arg.find("--baton-handover-wait"), std::string::npos) << arg;
}

// Slurm requeued the predecessor (its node failed; the job asked for --requeue) while its successor was
// queued: once the successor runs, the requeued copy is cancelled instead of training beside it, and
// the chain goes on with one job for each seq.
TEST_F(ProvisionerTest, APredecessorRequeuedBySlurmIsCancelledOnceItsSuccessorRuns)
{
    const ChainRow chain = chainWithRunningJob(7);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(stateOf(chain), ChainState::SuccessorPending);
    cluster_.find(7)->state = "PENDING"; // requeued
    cluster_.find(7)->startTime = 0;
    tick();
    EXPECT_TRUE(cluster_.cancelled.empty()) << "nothing runs yet: the requeued job may run first";
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    EXPECT_EQ(cluster_.cancelled, std::vector<std::int64_t> { 7 });
    EXPECT_TRUE(cluster_.signals.empty()) << "a queued job is not signalled";
    tick();
    const ChainRow after = *store_.chains.find(chain.id);
    EXPECT_EQ(after.state, ChainState::Running);
    EXPECT_EQ(after.seq, 1);
    EXPECT_EQ(cluster_.submissions.size(), 1u);
}

// The same during a handover: the predecessor's node failed after the TERM, and Slurm requeued it.
TEST_F(ProvisionerTest, APredecessorRequeuedDuringTheHandoverIsCancelled)
{
    const ChainRow chain = chainWithRunningJob(8);
    tick(std::make_shared<AlwaysSubmit>());
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    ASSERT_EQ(stateOf(chain), ChainState::Handover);
    cluster_.find(8)->state = "PENDING";
    cluster_.find(8)->startTime = 0;
    tick();
    EXPECT_EQ(cluster_.cancelled, std::vector<std::int64_t> { 8 });
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Running);
    EXPECT_EQ(store_.chains.find(chain.id)->seq, 1);
}

TEST_F(ProvisionerTest, TrainingDoneCancelsThePendingSuccessor)
{
    const ChainRow chain = chainWithRunningJob(5);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    store_.checkpoints.record(chain.id, 5,
        Json { { "name", "ckpt-000000000900" }, { "iteration", 900 }, { "created_unix", cluster_.now },
            { "total_bytes", 10 }, { "final", true }, { "training_done", true } },
        "/chains/x");
    cluster_.end(5, "COMPLETED");
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Finished);
    EXPECT_EQ(cluster_.cancelled,
        std::vector<std::int64_t> { cluster_.submissions.empty() ? 0 : cluster_.jobs.back().id });
}

TEST_F(ProvisionerTest, PausedChainWithdrawsItsPendingSuccessorAndSubmitsNothing)
{
    const ChainRow chain = chainWithRunningJob(6);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_TRUE(forceState(chain.id, ChainState::SuccessorPending, ChainState::Paused));
    tick(std::make_shared<AlwaysSubmit>());
    EXPECT_EQ(cluster_.cancelled,
        std::vector<std::int64_t> { cluster_.submissions.empty() ? 0 : cluster_.jobs.back().id });
    cluster_.end(6, "TIMEOUT");
    tick(std::make_shared<AlwaysSubmit>());
    EXPECT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(stateOf(chain), ChainState::Paused);
}

} // namespace

// A running chain whose job did not change: the tick writes no job row, and the policy's "wait" is
// written once per interval, not once per tick.
class NeverSubmit final : public baton::sim::Policy {
public:
    std::string name() const override { return "never"; }
    std::size_t firstSubmit(std::span<const baton::sim::DecisionPoint> points) const override
    {
        return points.size();
    }
};

TEST_F(ProvisionerTest, UnchangedJobsAreNotWrittenAndWaitsAreRecordedOncePerInterval)
{
    config_.policy = "avg"; // so that the lead floor would apply; the job has an hour left
    const ChainRow chain = chainWithRunningJob(21);
    const std::int64_t jobId = 21;
    auto rowVersion = [&] {
        return std::string(connection_
                               .exec(baton::db::Statement { "test_job_xmin",
                                         "SELECT xmin::text FROM jobs WHERE slurm_job_id = $1", true },
                                   baton::db::Params(jobId))
                               .text(0, 0));
    };
    auto waits = [&] {
        return connection_
            .exec(baton::db::Statement { "test_waits",
                      "SELECT count(*) FROM decisions WHERE chain_id = $1 AND action = 'wait'", true },
                baton::db::Params(chain.id))
            .int64(0, 0);
    };
    Provisioner provisioner(
        config_, store_, cluster_, metrics_, std::make_shared<NeverSubmit>(), timeOnlyDecisionPoints);
    // Start at the beginning of the chain's interval.
    cluster_.now -= (cluster_.now + Provisioner::waitRecordPhase(chain.id)) % Provisioner::waitRecordSeconds;
    provisioner.tick();
    const std::string before = rowVersion();
    EXPECT_EQ(waits(), 1);
    cluster_.now += 30;
    provisioner.tick();
    EXPECT_EQ(rowVersion(), before) << "an unchanged job was written again";
    EXPECT_EQ(waits(), 1) << "a wait decision per tick";
    cluster_.now += 270; // the next interval
    provisioner.tick();
    EXPECT_EQ(waits(), 2);
    // A change of slurmctld's facts is written.
    cluster_.end(jobId, "TIMEOUT");
    provisioner.tick();
    EXPECT_NE(rowVersion(), before);
    EXPECT_EQ(store_.jobs.ofChain(chain.id).front().state, "TIMEOUT");
}

// The lead floor submits a successor at most half a job's limit early, so that a job with a short limit
// still trains before it hands over.
TEST_F(ProvisionerTest, TheLeadTakesAtMostHalfOfAShortLimit)
{
    config_.policy = "avg";
    config_.submitLead = std::chrono::seconds(600);
    const ChainRow chain = chainWithRunningJob(31);
    cluster_.find(31)->timeLimitSeconds = 900; // started 60 s ago: 840 s left; half the limit is 450 s
    const auto never = std::make_shared<NeverSubmit>();
    tick(never);
    EXPECT_TRUE(cluster_.submissions.empty());
    cluster_.now += 340; // 500 s left: within the configured lead, not within half the limit
    tick(never);
    EXPECT_TRUE(cluster_.submissions.empty()) << "the successor went in with 500 s of a 900 s job left";
    EXPECT_EQ(stateOf(chain), ChainState::Running);
    cluster_.now += 60; // 440 s left
    tick(never);
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);

    // A long job keeps the whole configured lead.
    const ChainRow longer = chainWithRunningJob(32, "-long"); // 3,600 s limit, 3,540 s left
    cluster_.now += 2950; // 590 s left
    tick(never);
    EXPECT_EQ(stateOf(longer), ChainState::SuccessorPending);
}

// The tick's set-based read sees what the per-chain reads see: the current and next job and
// submission, and the end of training.
TEST_F(ProvisionerTest, LiveChainsForTickMatchThePerChainReads)
{
    const ChainRow chain = chainWithRunningJob(11);
    ClusterJob second = cluster_.jobs.front();
    second.id = 12;
    cluster_.jobs.push_back(second);
    const ChainRow other = store_.chains.create(65534, "nobody", "other", "/chains/other",
        Json { { "script", "#!/bin/bash\ntrain\n" }, { "workdir", "/tmp" } });
    store_.jobs.upsert(other.id, 0, second);
    tick(std::make_shared<AlwaysSubmit>()); // successors submitted for both
    ASSERT_EQ(cluster_.submissions.size(), 2u) << "the spec is read for the submission";
    EXPECT_EQ(cluster_.submissions.back().scriptText, "#!/bin/bash\ntrain\n");
    store_.checkpoints.record(other.id, std::nullopt,
        Json { { "name", "ckpt-000000000007" }, { "iteration", 7 }, { "training_done", true } }, "/c");
    LiveChainCache cache;
    const auto live = readLiveChains(connection_, cache);
    ASSERT_EQ(live.size(), 2u);
    for (const LiveChain& view : live) {
        const ChainRow row = *store_.chains.find(view.chain.id);
        EXPECT_EQ(view.chain.state, row.state);
        EXPECT_TRUE(view.chain.spec.is_null()) << "specs are read when a job is submitted";
        EXPECT_EQ(view.trainingDone, store_.checkpoints.trainingDone(row.id));
        ASSERT_TRUE(view.next.has_value());
        EXPECT_EQ(view.next->key, store_.submissions.find(row.id, row.seq + 1)->key);
        EXPECT_EQ(view.current.has_value(), store_.submissions.find(row.id, row.seq).has_value());
        std::size_t expectedJobs = 0;
        for (const JobRow& job : store_.jobs.ofChain(row.id))
            expectedJobs += job.seq == row.seq || job.seq == row.seq + 1;
        EXPECT_EQ(view.jobs.size(), expectedJobs);
    }
    EXPECT_TRUE(std::any_of(live.begin(), live.end(), [&](const LiveChain& v) { return v.trainingDone; }));
    for (const LiveChain& view : live)
        EXPECT_EQ(view.trainingDone, view.chain.id == other.id) << chain.id;
}

// A tick reads a chain's jobs, submissions and end of training again only when one of them changed,
// whoever changed them (here batond's own statements and an operator's SQL); the chain's own row every
// time. What it keeps is always what a fresh read sees.
TEST_F(ProvisionerTest, LiveChainsAreReadAgainOnlyWhenTheirRowsChanged)
{
    const ChainRow a = chainWithRunningJob(41, "-a");
    const ChainRow b = chainWithRunningJob(42, "-b");
    LiveChainCache cache;
    const auto read = [&](std::size_t expectReadAgain) {
        SCOPED_TRACE("expecting " + std::to_string(expectReadAgain) + " chains read again");
        const std::vector<LiveChain> kept = readLiveChains(connection_, cache);
        EXPECT_EQ(cache.readAgain, expectReadAgain);
        LiveChainCache empty;
        const std::vector<LiveChain> fresh = readLiveChains(connection_, empty);
        EXPECT_EQ(empty.readAgain, fresh.size());
        EXPECT_EQ(cache.chains.size(), fresh.size()) << "ended chains are dropped";
        EXPECT_EQ(kept.size(), fresh.size());
        for (std::size_t i = 0; i < std::min(kept.size(), fresh.size()); ++i) {
            EXPECT_EQ(chainView(kept[i].chain), chainView(fresh[i].chain));
            EXPECT_EQ(kept[i].trainingDone, fresh[i].trainingDone);
            EXPECT_EQ(kept[i].next.has_value(), fresh[i].next.has_value());
            EXPECT_EQ(kept[i].current.has_value(), fresh[i].current.has_value());
            EXPECT_EQ(kept[i].jobs.size(), fresh[i].jobs.size());
            for (std::size_t j = 0; j < std::min(kept[i].jobs.size(), fresh[i].jobs.size()); ++j) {
                EXPECT_EQ(kept[i].jobs[j].state, fresh[i].jobs[j].state);
                EXPECT_EQ(kept[i].jobs[j].endTime, fresh[i].jobs[j].endTime);
            }
        }
        return kept;
    };
    const auto of = [](const std::vector<LiveChain>& live, const ChainRow& chain) {
        const auto it = std::find_if(
            live.begin(), live.end(), [&](const LiveChain& view) { return view.chain.id == chain.id; });
        return it == live.end() ? std::optional<LiveChain>() : std::optional(*it);
    };
    read(2);
    read(0);

    store_.submissions.recordIntent(a.id, 1, Submitter::submissionKey(a, 1), "policy");
    EXPECT_TRUE(of(read(1), a)->next.has_value());
    connection_.execScript("UPDATE jobs SET state = 'COMPLETING', end_time = now() WHERE slurm_job_id = 42");
    EXPECT_EQ(of(read(1), b)->jobs.at(0).state, "COMPLETING");
    store_.checkpoints.record(b.id, std::nullopt,
        Json { { "name", "ckpt-000000000009" }, { "iteration", 9 }, { "training_done", true } }, "/c");
    EXPECT_TRUE(of(read(1), b)->trainingDone);
    connection_.execScript("DELETE FROM submissions WHERE chain_id = " + std::to_string(a.id) + " AND seq = 1");
    EXPECT_FALSE(of(read(1), a)->next.has_value());
    // A new seq alone (the chain's own row) makes other rows the current and next job's.
    ASSERT_TRUE(store_.chains.advance(*store_.chains.find(a.id), ChainEvent::JobAdopted));
    EXPECT_EQ(of(read(1), a)->jobs.size(), 0u) << "no job 1 or 2 yet";
    // The chain's own row is read every time: a change to it alone reads no other rows.
    ASSERT_TRUE(forceState(a.id, ChainState::Running, ChainState::Paused));
    EXPECT_EQ(of(read(0), a)->chain.state, ChainState::Paused);
    ASSERT_TRUE(forceState(b.id, ChainState::Running, ChainState::Finished));
    EXPECT_FALSE(of(read(0), b).has_value());

    // A new database session (a reconnect, perhaps to a promoted standby) reads everything again.
    baton::db::Connection other(conninfo_);
    other.execScript("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND pid <> pg_backend_pid()");
    read(1);
}

// A tick writes the job rows its steps found changed in one statement. A job written twice in a batch
// ends as two statements would leave it: the first write's seq (a recorded job keeps its place in the
// chain), the last write's facts.
TEST_F(ProvisionerTest, JobRowsWrittenInOneBatchEndAsWrittenOneByOne)
{
    const ChainRow chain = chainWithRunningJob(71);
    ClusterJob ended = cluster_.jobs.front(), successor = ended, started = ended;
    ended.state = "COMPLETED";
    ended.endTime = cluster_.now;
    ended.exitCode = 0;
    successor.id = started.id = 72;
    successor.state = "PENDING";
    successor.startTime = 0;
    started.startTime = cluster_.now - 5;
    store_.jobs.upsert(std::vector<JobStore::Write> {
        { chain.id, 1, successor }, { chain.id, 0, ended }, { chain.id, 5, started } });
    const std::vector<JobRow> jobs = store_.jobs.ofChain(chain.id);
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0].seq, 0);
    EXPECT_EQ(jobs[0].state, "COMPLETED");
    EXPECT_EQ(jobs[0].endTime, cluster_.now);
    EXPECT_EQ(jobs[0].exitCode, 0);
    EXPECT_EQ(jobs[1].seq, 1) << "the first write's seq";
    EXPECT_EQ(jobs[1].slurmJobId, 72);
    EXPECT_EQ(jobs[1].state, "RUNNING") << "the last write's facts";
    EXPECT_EQ(jobs[1].startTime, cluster_.now - 5);
    EXPECT_FALSE(jobs[1].endTime.has_value());
    store_.jobs.upsert({}); // nothing to write: no statement
}

// One provisioner through a chain's whole handover, as batond keeps it from tick to tick: what it kept
// of the chain is read again after each of its own changes.
TEST_F(ProvisionerTest, OneProvisionerFollowsAChainThroughHandover)
{
    const ChainRow chain = chainWithRunningJob(51);
    Provisioner provisioner(
        config_, store_, cluster_, metrics_, std::make_shared<AlwaysSubmit>(), timeOnlyDecisionPoints);
    provisioner.tick();
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    provisioner.tick();
    EXPECT_EQ(cluster_.submissions.size(), 1u) << "nothing new while the successor waits";
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    provisioner.tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    cluster_.now += 30;
    cluster_.end(51, "COMPLETED");
    provisioner.tick();
    EXPECT_EQ(stateOf(chain), ChainState::Running);
    EXPECT_EQ(store_.chains.find(chain.id)->seq, 1);
    provisioner.tick(); // the next successor for job 1
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_EQ(cluster_.submissions.back().key, Submitter::submissionKey(chain, 2));
}

// The checkpoint-age gauge of a state is the age of the oldest newest checkpoint among its live chains,
// taken from what the tick read: a new checkpoint counts from the tick that reads it.
TEST_F(ProvisionerTest, CheckpointAgeGaugesFollowEachChainsNewestCheckpoint)
{
    const ChainRow a = chainWithRunningJob(61, "-a");
    const ChainRow b = chainWithRunningJob(62, "-b");
    chainWithRunningJob(63, "-c"); // no checkpoint: counts as age 0
    Provisioner provisioner(config_, store_, cluster_, metrics_,
        std::make_shared<baton::sim::ReactivePolicy>(), timeOnlyDecisionPoints);
    const auto checkpoint = [&](const ChainRow& chain, int iteration, std::int64_t ago) {
        store_.checkpoints.record(chain.id, std::nullopt,
            Json { { "name", baton::contract::checkpointDirName(static_cast<std::uint64_t>(iteration)) },
                { "iteration", iteration },
                { "created_unix", cluster_.now - ago } },
            "/c");
    };
    const auto age = [&] { return metrics_.checkpointAge(ChainState::Running).Value(); };
    provisioner.tick();
    EXPECT_EQ(age(), 0);
    checkpoint(a, 10, 600);
    checkpoint(b, 10, 900);
    checkpoint(b, 20, 300); // b's newest: 300 s old
    cluster_.now += 30;
    provisioner.tick();
    EXPECT_DOUBLE_EQ(age(), 630) << "a's newest, the older of the two";
    cluster_.now += 30;
    provisioner.tick();
    EXPECT_DOUBLE_EQ(age(), 660) << "unchanged rows: the same checkpoints, older by a tick";
    checkpoint(a, 20, 0);
    cluster_.now += 30;
    provisioner.tick();
    EXPECT_DOUBLE_EQ(age(), 390) << "a checkpointed again: b's is now the oldest";
    EXPECT_EQ(metrics_.checkpointAge(ChainState::Paused).Value(), 0);
}

// The ended states' gauges read every chain ever run, so batond recounts them only when the live chains
// and the highest chain id show that a chain ended or came back; the live states every tick.
TEST_F(ProvisionerTest, EndedChainsAreRecountedWhenAChainEndsOrComesBack)
{
    const ChainRow first = chainWithRunningJob(21, "-a");
    const ChainRow second = chainWithRunningJob(22, "-b");
    const ChainRow history = store_.chains.create(65534, "nobody", "history", "/chains/history", Json());
    ASSERT_TRUE(forceState(history.id, ChainState::Running, ChainState::Finished));
    Provisioner provisioner(config_, store_, cluster_, metrics_,
        std::make_shared<baton::sim::ReactivePolicy>(), timeOnlyDecisionPoints);
    const auto gauge = [&](ChainState state) { return metrics_.chains(state).Value(); };
    const auto nextTick = [&] {
        cluster_.now += 30;
        provisioner.tick();
    };
    provisioner.tick();
    EXPECT_EQ(gauge(ChainState::Running), 2);
    EXPECT_EQ(gauge(ChainState::Finished), 1);

    // Nothing began or ended: the ended states are not read again (a change among them that no chain's
    // end or return explains, which batond never makes, stays unseen).
    ASSERT_TRUE(forceState(history.id, ChainState::Finished, ChainState::Failed));
    nextTick();
    EXPECT_EQ(gauge(ChainState::Finished), 1);
    EXPECT_EQ(gauge(ChainState::Failed), 0);

    // A chain that began and ended between two ticks is seen by its id, and the recount takes in all.
    const ChainRow unseen = store_.chains.create(65534, "nobody", "unseen", "/chains/unseen", Json());
    ASSERT_TRUE(forceState(unseen.id, ChainState::Running, ChainState::Finished));
    nextTick();
    EXPECT_EQ(gauge(ChainState::Finished), 1);
    EXPECT_EQ(gauge(ChainState::Failed), 1);

    // A chain counted live ends.
    ASSERT_TRUE(forceState(first.id, ChainState::Running, ChainState::Cancelled));
    nextTick();
    EXPECT_EQ(gauge(ChainState::Running), 1);
    EXPECT_EQ(gauge(ChainState::Cancelled), 1);

    // A failed chain resubmitted comes back.
    ASSERT_TRUE(forceState(history.id, ChainState::Failed, ChainState::Paused));
    nextTick();
    EXPECT_EQ(gauge(ChainState::Failed), 0);
    EXPECT_EQ(gauge(ChainState::Paused), 1);

    // A new chain still live is no reason to recount.
    chainWithRunningJob(23, "-c");
    ASSERT_TRUE(forceState(unseen.id, ChainState::Finished, ChainState::Cancelled));
    nextTick();
    EXPECT_EQ(gauge(ChainState::Running), 2);
    EXPECT_EQ(gauge(ChainState::Cancelled), 1) << "not recounted";

    ASSERT_TRUE(forceState(second.id, ChainState::Running, ChainState::Finished));
    nextTick();
    EXPECT_EQ(gauge(ChainState::Running), 1);
    EXPECT_EQ(gauge(ChainState::Finished), 1);
    EXPECT_EQ(gauge(ChainState::Cancelled), 2);
}

// Processed events and decisions past the retention period go, the oldest first and at most a batch a
// tick; newer rows and everything with retention 0 stay.
TEST_F(ProvisionerTest, HistoryPastTheRetentionPeriodIsPrunedInBatches)
{
    const ChainRow chain = chainWithRunningJob(31);
    const auto run = [&](const char* name, const char* sql) {
        return connection_.exec(baton::db::Statement { name, sql }).int64(0, 0);
    };
    // 5,100 decisions 100 days old and 10 from yesterday; 3 old processed events, 1 new.
    connection_.exec(
        baton::db::Statement { "test_old_decisions",
            "INSERT INTO decisions (chain_id, decided_at, policy, action)"
            " SELECT $1::bigint, now() - make_interval(days => 100) + g * interval '1 s', 'avg', 'wait'"
            " FROM generate_series(1, 5100) g UNION ALL SELECT $1::bigint, now() - interval '1 day',"
            " 'avg', 'wait' FROM generate_series(1, 10)" },
        baton::db::Params(chain.id));
    run("test_old_events",
        "WITH added AS (INSERT INTO events (idempotency_key, kind, payload, received_at, processed_at)"
        " SELECT 'test-' || g, 'step_start', '{}', now() - make_interval(days => CASE WHEN g <= 3 THEN 100"
        " ELSE 0 END), now() FROM generate_series(1, 4) g RETURNING 1) SELECT count(*) FROM added");
    const auto decisions = [&] { return run("test_count_decisions", "SELECT count(*) FROM decisions"); };
    const auto oldDecisions = [&] {
        return run(
            "test_count_old", "SELECT count(*) FROM decisions WHERE decided_at < now() - interval '90 days'");
    };
    const auto events = [&] { return run("test_count_events", "SELECT count(*) FROM events"); };

    config_.retentionDays = 0;
    tick();
    EXPECT_EQ(oldDecisions(), 5100);
    EXPECT_EQ(events(), 4);

    // One service: a full batch is followed by another prune the next tick, a partial one only
    // pruneEveryTicks later.
    config_.retentionDays = 90;
    Provisioner service(config_, store_, cluster_, metrics_, std::make_shared<baton::sim::ReactivePolicy>(),
        timeOnlyDecisionPoints);
    const std::int64_t before = decisions();
    service.tick();
    EXPECT_EQ(oldDecisions(), 100) << "one batch of 5,000 a tick";
    EXPECT_EQ(run("test_count_oldest",
                  "SELECT count(*) FROM decisions WHERE decided_at <= now() - make_interval(days => 100, "
                  "secs => -5000)"),
        0)
        << "the oldest first";
    EXPECT_EQ(events(), 1);
    EXPECT_EQ(metrics_.pruned("events").Value(), 3);
    EXPECT_GE(decisions(), before - 5000);
    service.tick();
    EXPECT_EQ(oldDecisions(), 0);
    EXPECT_GE(decisions(), 10) << "yesterday's decisions stay";
    EXPECT_EQ(metrics_.pruned("decisions").Value(), 5100);

    run("test_more_old_decisions",
        "WITH added AS (INSERT INTO decisions (chain_id, decided_at, policy, action) SELECT id,"
        " now() - make_interval(days => 100), 'avg', 'wait' FROM chains RETURNING 1) SELECT count(*) FROM "
        "added");
    for (int tick = 1; tick < Provisioner::pruneEveryTicks; ++tick)
        service.tick();
    EXPECT_EQ(oldDecisions(), 1) << "not pruned before " << Provisioner::pruneEveryTicks << " ticks";
    service.tick();
    EXPECT_EQ(oldDecisions(), 0);
}

// A learned policy follows the rules stored with its model: one per job size when `sim compare` chose
// them so, else the model's quantile; rules that cannot be read fall back to that quantile.
TEST_F(ProvisionerTest, LivePredictFollowsTheRulesStoredWithItsModel)
{
    std::vector<baton::sim::WaitSample> samples;
    for (int i = 0; i < 400; ++i) {
        baton::sim::WaitSample s;
        s.x[0] = static_cast<float>(1 + i % 8);
        s.x[5] = static_cast<float>(i % 50);
        s.waitSeconds = 60.0 * (1 + i % 50) * (1 + i % 3);
        samples.push_back(s);
    }
    baton::sim::TrainOptions options;
    options.rounds = 10;
    const auto predictor = baton::sim::WaitPredictor::train(samples, options);
    const Json rules = Json::array({ { { "nodes", 1 }, { "rule", "window" }, { "value", 0.65 } },
        { { "nodes", 8 }, { "rule", "quantile" }, { "value", 0.25 }, { "persist", 1 } } });
    baton::sim::storeModel(connection_, predictor, "waits", std::nullopt,
        Json { { "evaluation", { { "predict", { { "q", nullptr }, { "rules", rules } } } } },
            { "tolerance_s", 600 } });
    config_.policy = "predict";
    config_.modelName = "waits";
    const LivePolicy live = makeLivePolicy(config_, connection_);
    ASSERT_NE(live.predictor, nullptr);
    const auto* perSize = dynamic_cast<const baton::sim::ShapeRulesPolicy*>(live.policy.get());
    ASSERT_NE(perSize, nullptr);
    EXPECT_EQ(
        baton::sim::describeRules(perSize->rules()), "1 node: window tau=0.65; 8 nodes: quantile q=0.25");
    EXPECT_EQ(live.policy->name(), "predict");

    // A newer version whose rules are damaged: its quantile.
    baton::sim::storeModel(connection_, predictor, "waits", std::nullopt,
        Json { { "evaluation",
            { { "predict",
                { { "q", 0.3 },
                    { "rules", Json::array({ { { "nodes", 1 }, { "rule", "guess" } } }) } } } } } });
    const LivePolicy fallback = makeLivePolicy(config_, connection_);
    const auto* quantile = dynamic_cast<const baton::sim::QuantilePolicy*>(fallback.policy.get());
    ASSERT_NE(quantile, nullptr);
    EXPECT_DOUBLE_EQ(quantile->q(), 0.3);
}

// A checkpoint report whose values no column can hold (a user's manifest said so) is set aside with its
// reason; it neither fails the tick nor stops any other chain.
TEST_F(ProvisionerTest, PoisonEventIsSetAsideAndEveryOtherChainIsStepped)
{
    const ChainRow poisoned = chainWithRunningJob(31, "-a");
    const ChainRow other = chainWithRunningJob(32, "-b");
    const auto report = [&](const std::string& key, const Json& checkpoint) {
        ASSERT_TRUE(store_.events.insert(key, "task_exit", poisoned.name, 31,
            Json { { "chain_dir", "/chains/x" }, { "checkpoint", checkpoint } }, 0));
    };
    report("huge-time", Json { { "name", "ckpt-000000000010" }, { "iteration", 10 }, { "created_unix", 1e300 } });
    report("huge-iteration",
        Json { { "name", "ckpt-000000000010" }, { "iteration", 9223372036854775807LL }, { "created_unix", 1 } });
    report("bad-name", Json { { "name", "../../etc" }, { "iteration", 10 }, { "created_unix", 1 } });
    EXPECT_NO_THROW(tick(std::make_shared<AlwaysSubmit>()));
    EXPECT_EQ(stateOf(other), ChainState::SuccessorPending) << "the other chain was stepped";
    EXPECT_EQ(metrics_.chainErrors("event").Value(), 3);
    EXPECT_TRUE(store_.events.unprocessed(10).empty()) << "set aside, never tried again";
    const auto errors = connection_.exec(baton::db::Statement { "test_event_errors",
        "SELECT count(*) FROM events WHERE error LIKE '%out of range%'" });
    EXPECT_EQ(errors.int64(0, 0), 3);
    EXPECT_FALSE(store_.checkpoints.latest(poisoned.id).has_value());
    EXPECT_NO_THROW(tick(std::make_shared<AlwaysSubmit>()));
}

// A job row that would be a second live job of one (chain, seq) is refused alone: the batch writes the
// other chains' rows.
TEST_F(ProvisionerTest, AJobRowThatClashesIsRefusedAloneNotTheBatch)
{
    const ChainRow a = chainWithRunningJob(33, "-a");
    const ChainRow b = chainWithRunningJob(34, "-b");
    ClusterJob clash = cluster_.jobs.front();
    clash.id = 35; // a second job for a's seq 0
    ClusterJob moved = cluster_.jobs.back();
    moved.state = "COMPLETED";
    moved.endTime = cluster_.now;
    const std::vector<JobStore::Write> batch { { a.id, 0, clash }, { b.id, 0, moved } };
    const auto rejected = store_.jobs.upsert(batch);
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_EQ(rejected[0].slurmJobId, 35);
    EXPECT_EQ(rejected[0].chainId, a.id);
    EXPECT_EQ(store_.jobs.bySlurmId(34)->job.state, "COMPLETED");
    EXPECT_FALSE(store_.jobs.bySlurmId(35).has_value());
}

// A chain that runs again continues after every seq it ever used: its next job never clashes with the
// rows of a successor that was cancelled or a job adopted before.
TEST_F(ProvisionerTest, ARestartedChainContinuesAfterEverySeqItUsed)
{
    const ChainRow chain = chainWithRunningJob(36);
    tick(std::make_shared<AlwaysSubmit>()); // successor: seq 1
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    ASSERT_TRUE(store_.chains.transition(*store_.chains.find(chain.id), ChainEvent::Cancel, "test"));
    const auto seq = store_.chains.restart(*store_.chains.find(chain.id), ChainEvent::Resubmit, "test");
    ASSERT_EQ(seq, 2);
    const ChainRow restarted = *store_.chains.find(chain.id);
    EXPECT_EQ(restarted.state, ChainState::Running);
    EXPECT_EQ(restarted.seq, 2);
    ASSERT_TRUE(store_.submissions.recordIntent(chain.id, 2, Submitter::submissionKey(restarted, 2), "restart"));
    EXPECT_NO_THROW(tick()); // the intent of a resubmission is submitted at once
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_EQ(store_.submissions.find(chain.id, 2)->state, "submitted");
    // A second restart of a chain read before the first is fenced out.
    EXPECT_FALSE(store_.chains.restart(*store_.chains.find(chain.id), ChainEvent::Resubmit, "test"))
        << "a running chain does not restart";
}

// A successor cancelled while it was queued (Slurm sets its start to its end) never ran: the predecessor
// is not asked to hand over, and the chain goes on as if the successor had not been submitted.
TEST_F(ProvisionerTest, ASuccessorCancelledWhileQueuedIsWithdrawnNotTakenForStarted)
{
    const ChainRow chain = chainWithRunningJob(37);
    tick(std::make_shared<AlwaysSubmit>());
    const std::int64_t queued = cluster_.jobs.back().id;
    cluster_.now += 10;
    cluster_.cancel(queued, 65534); // the user's scancel
    tick(std::make_shared<baton::sim::ReactivePolicy>());
    EXPECT_TRUE(cluster_.signals.empty()) << "the running predecessor was told to hand over";
    EXPECT_EQ(stateOf(chain), ChainState::Running);
    EXPECT_EQ(store_.submissions.find(chain.id, 1)->state, "cancelled");
    // The policy submits seq 1 again; its job gets a row of its own beside the withdrawn one.
    cluster_.now += 10;
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    EXPECT_NE(cluster_.submissions[1].key, cluster_.submissions[0].key)
        << "the withdrawn job keeps its key: the new submission of the seq has its own";
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    EXPECT_EQ(store_.jobs.bySlurmId(cluster_.jobs.back().id)->job.seq, 1);
    EXPECT_TRUE(store_.jobs.bySlurmId(queued)->job.withdrawn);
}

// Pause withdraws the queued successor; resume does not take that cancelled job for a started one, nor
// pause the chain again.
TEST_F(ProvisionerTest, PauseThenResumeGoesOnWithoutAHandoverOrASecondPause)
{
    const ChainRow chain = chainWithRunningJob(38);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_TRUE(store_.chains.transition(*store_.chains.find(chain.id), ChainEvent::Pause, "test"));
    cluster_.now += 10;
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(cluster_.cancelled.size(), 1u);
    ASSERT_TRUE(store_.chains.transition(*store_.chains.find(chain.id), ChainEvent::Resume, "test"));
    for (int i = 0; i < 3; ++i) {
        cluster_.now += 10;
        tick(std::make_shared<baton::sim::ReactivePolicy>());
        EXPECT_EQ(stateOf(chain), ChainState::Running);
    }
    EXPECT_TRUE(cluster_.signals.empty());
    // When its job ends, the chain submits its next one as usual.
    cluster_.end(38, "TIMEOUT");
    cluster_.now += 60;
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    EXPECT_EQ(cluster_.submissions.size(), 2u);
}

// A chain whose job was cancelled by hand is paused; its owner's resume submits the next job instead of
// pausing it again on the same cancelled job.
TEST_F(ProvisionerTest, ResumeAfterAHandCancelledJobSubmitsTheNextJob)
{
    const ChainRow chain = chainWithRunningJob(39);
    cluster_.end(39, "CANCELLED");
    tick();
    ASSERT_EQ(stateOf(chain), ChainState::Paused);
    const ChainRow paused = *store_.chains.find(chain.id);
    ASSERT_TRUE(store_.chains.transition(paused, ChainEvent::Resume, "test"));
    store_.chains.setResubmitRequested(chain.id, true); // what the API's resume does for an ended current job
    cluster_.now += 10;
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    EXPECT_EQ(cluster_.submissions.size(), 1u);
}

// The job that resume asked for is cancelled by hand while queued (found by the chaos test, seed
// 18276838675589775455): it is withdrawn, and the chain submits another instead of pausing a second time
// for the running job cancelled before the resume.
TEST_F(ProvisionerTest, AWithdrawnSuccessorAfterAResumeDoesNotPauseAgainForTheOldCancelledJob)
{
    const ChainRow chain = chainWithRunningJob(46);
    cluster_.end(46, "CANCELLED");
    tick();
    ASSERT_EQ(stateOf(chain), ChainState::Paused);
    ASSERT_TRUE(store_.chains.transition(*store_.chains.find(chain.id), ChainEvent::Resume, "test"));
    store_.chains.setResubmitRequested(chain.id, true);
    cluster_.now += 10;
    tick();
    ASSERT_EQ(stateOf(chain), ChainState::SuccessorPending);
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    cluster_.now += 10;
    cluster_.cancel(cluster_.jobs.back().id, 65534); // the owner's scancel of the queued job
    for (int i = 0; i < 3; ++i) {
        cluster_.now += 10;
        tick();
        EXPECT_NE(stateOf(chain), ChainState::Paused) << store_.chains.find(chain.id)->reason.value_or("");
    }
    EXPECT_EQ(cluster_.submissions.size(), 2u) << "a replacement of the withdrawn job";
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
}

// Reconciliation by key matches only the chain owner's jobs: another user's job carrying the key is not
// adopted, and the chain submits its own.
TEST_F(ProvisionerTest, AnotherUsersJobWithTheSameKeyIsNeverAdopted)
{
    const ChainRow chain = chainWithRunningJob(40);
    ASSERT_TRUE(forceState(chain.id, ChainState::Running, ChainState::SuccessorPending));
    const ChainRow pending = *store_.chains.find(chain.id);
    const std::string key = Submitter::submissionKey(pending, 1);
    ASSERT_TRUE(store_.submissions.recordIntent(chain.id, 1, key, "policy"));
    ClusterJob impostor;
    impostor.id = 41;
    impostor.userId = 1000; // not the owner
    impostor.state = "RUNNING";
    impostor.comment = key;
    impostor.submitTime = impostor.startTime = cluster_.now;
    cluster_.jobs.push_back(impostor);
    cluster_.now += 3600;
    cluster_.find(40)->startTime = cluster_.now - 60;
    tick();
    ASSERT_EQ(cluster_.submissions.size(), 1u) << "the chain submitted its own job";
    EXPECT_NE(store_.submissions.find(chain.id, 1)->slurmJobId, 41);
    EXPECT_TRUE(cluster_.signals.empty());
    EXPECT_NE(key.find(pending.token), std::string::npos);
    EXPECT_GE(pending.token.size(), 32u) << "unguessable";
}

// A handover whose signal did not reach the predecessor is signalled again until it is; the signal is
// recorded only once delivered.
TEST_F(ProvisionerTest, AHandoverSignalThatFailedIsSentAgain)
{
    const ChainRow chain = chainWithRunningJob(42);
    tick(std::make_shared<AlwaysSubmit>());
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    cluster_.failingSignals = 2;
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    EXPECT_TRUE(cluster_.signals.empty());
    EXPECT_FALSE(store_.handovers.signal(chain.id, 0).sentAt);
    cluster_.now += 10;
    tick(); // fails again
    EXPECT_TRUE(cluster_.signals.empty());
    cluster_.now += 10;
    tick();
    ASSERT_EQ(cluster_.signals.size(), 1u);
    EXPECT_EQ(cluster_.signals[0].jobId, 42);
    EXPECT_EQ(store_.handovers.signal(chain.id, 0).sentAt, cluster_.now);
    cluster_.now += 10;
    tick();
    EXPECT_EQ(cluster_.signals.size(), 1u) << "delivered once: not sent again";
}

// sbatch timed out after slurmctld had accepted the job: the next submission of that key finds the job
// in the queue instead of submitting a second one.
TEST_F(ProvisionerTest, AnSbatchThatTimedOutAfterAcceptingIsNotSubmittedTwice)
{
    const ChainRow chain = chainWithRunningJob(43);
    cluster_.timeoutAfterAccept = true;
    tick(std::make_shared<AlwaysSubmit>());
    cluster_.timeoutAfterAccept = false;
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(store_.submissions.find(chain.id, 1)->state, "failed");
    for (int i = 0; i < 3; ++i) {
        cluster_.now += 10;
        tick(std::make_shared<AlwaysSubmit>());
    }
    EXPECT_EQ(cluster_.submissions.size(), 1u) << "a second job for one key";
    EXPECT_EQ(store_.submissions.find(chain.id, 1)->state, "submitted");
    EXPECT_EQ(store_.submissions.find(chain.id, 1)->slurmJobId, cluster_.jobs.back().id);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
}

// Cancelling a chain is carried out by the tick: its current job and a successor submitted in the tick
// before are both cancelled, and again while slurmctld still shows them.
TEST_F(ProvisionerTest, CancelWithdrawsTheCurrentJobAndAJustSubmittedSuccessor)
{
    const ChainRow chain = chainWithRunningJob(44);
    tick(std::make_shared<AlwaysSubmit>());
    const std::int64_t successor = cluster_.jobs.back().id;
    ASSERT_TRUE(store_.chains.transition(*store_.chains.find(chain.id), ChainEvent::Cancel, "test"));
    store_.chains.setWithdrawJobs(chain.id, true);
    cluster_.uncancellable = { 44 }; // the first scancel of the running job fails
    cluster_.now += 10;
    EXPECT_NO_THROW(tick());
    EXPECT_EQ(cluster_.cancelled, std::vector<std::int64_t> { successor });
    cluster_.uncancellable.clear();
    cluster_.now += 10;
    tick();
    EXPECT_EQ(cluster_.cancelled, (std::vector<std::int64_t> { successor, 44 }));
    EXPECT_EQ(store_.chains.toWithdraw().size(), 1u) << "until squeue shows them ended";
    cluster_.now += 10;
    tick();
    EXPECT_TRUE(store_.chains.toWithdraw().empty());
    EXPECT_EQ(cluster_.cancelled.size(), 2u);
}

// A chain whose Slurm actions keep failing is quarantined with its reason after a few ticks; the other
// chains go on, and its owner's resume takes it back.
TEST_F(ProvisionerTest, AChainWhoseActionsKeepFailingIsQuarantinedAlone)
{
    const ChainRow stuck = chainWithRunningJob(45, "-a");
    const ChainRow other = chainWithRunningJob(46, "-b");
    ASSERT_TRUE(forceState(stuck.id, ChainState::Running, ChainState::Handover));
    store_.handovers.start(stuck.id, 0, 45, 47, cluster_.now - 100000); // long past the handover timeout
    store_.handovers.recordSignal(stuck.id, 0, cluster_.now - 100000);
    cluster_.uncancellable = { 45 };
    Provisioner provisioner(config_, store_, cluster_, metrics_, std::make_shared<AlwaysSubmit>(), timeOnlyDecisionPoints);
    for (int i = 0; i < Provisioner::quarantineAfterFailures; ++i) {
        EXPECT_NE(stateOf(stuck), ChainState::Quarantined) << "after " << i << " failures";
        cluster_.now += 10;
        EXPECT_NO_THROW(provisioner.tick());
    }
    EXPECT_EQ(stateOf(stuck), ChainState::Quarantined);
    EXPECT_NE(store_.chains.find(stuck.id)->reason->find("Access/permission denied"), std::string::npos);
    EXPECT_EQ(metrics_.chainErrors("slurm").Value(), Provisioner::quarantineAfterFailures);
    EXPECT_EQ(stateOf(other), ChainState::SuccessorPending);
    EXPECT_EQ(metrics_.chains(ChainState::Quarantined).Value(), 1);
    const auto cancels = cluster_.cancelled.size();
    provisioner.tick();
    EXPECT_EQ(cluster_.cancelled.size(), cancels) << "nothing is done for a quarantined chain";
    EXPECT_TRUE(store_.chains.transition(*store_.chains.find(stuck.id), ChainEvent::Resume, "test"));
}

// Every write is fenced on the state and seq its writer read: a tick's stale view cannot overwrite a
// pause or cancel that came in between, nor advance a chain that moved on.
TEST_F(ProvisionerTest, WritesFromAStaleViewChangeNothing)
{
    const ChainRow chain = chainWithRunningJob(48);
    ASSERT_TRUE(forceState(chain.id, ChainState::Running, ChainState::SuccessorPending));
    const ChainRow stale = *store_.chains.find(chain.id);
    ASSERT_TRUE(store_.chains.transition(stale, ChainEvent::Pause, "by the owner"));
    EXPECT_FALSE(store_.chains.advance(stale, ChainEvent::PredecessorEnded));
    EXPECT_FALSE(store_.chains.transition(stale, ChainEvent::SuccessorStarted));
    EXPECT_EQ(stateOf(chain), ChainState::Paused);
    EXPECT_EQ(store_.chains.find(chain.id)->seq, 0);
    EXPECT_FALSE(store_.chains.transition(*store_.chains.find(chain.id), ChainEvent::SuccessorStarted))
        << "the table does not allow it from paused";
}

// Two instances ask two munged daemons, each of which refuses only a credential it saw itself: the
// record in the database refuses the second use wherever it comes.
TEST_F(ProvisionerTest, ACredentialIsAcceptedOnceAcrossInstances)
{
    baton::db::Connection otherInstance(conninfo_);
    Store other(otherInstance);
    EXPECT_TRUE(CredentialStore(connection_).firstUse("MUNGE:AwQDAAA-one"));
    EXPECT_FALSE(other.credentials.firstUse("MUNGE:AwQDAAA-one"));
    EXPECT_TRUE(other.credentials.firstUse("MUNGE:AwQDAAA-two"));
}
