// The chain state machine against a real PostgreSQL and a scripted cluster (a fake of Slurm, in
// addition to the real-Slurm tests in batond_test): crash windows around sbatch, the retry budget, the
// end of training, handover bookkeeping.
#include "provisioner_fixture.hpp"

#include "common/baton_contract.hpp"
#include "tests/support/process.hpp"

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using namespace baton::service;
using namespace baton::service::fixture;

// The JSON in `path` (a file batond writes in a chain directory), or null when there is none.
Json jsonFileAt(const std::filesystem::path& path)
{
    std::ifstream in(path);
    return in ? Json::parse(in, nullptr, false) : Json();
}

// The owner of the file at `path`, or -1 when there is none.
long long ownerOf(const std::filesystem::path& path)
{
    struct stat info { };
    return ::stat(path.c_str(), &info) == 0 ? static_cast<long long>(info.st_uid) : -1;
}

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
    const ChainRow after = *tables_.chains.find(chain.id);
    EXPECT_EQ(after.state, ChainState::Running);
    EXPECT_EQ(after.seq, 1);
    EXPECT_EQ(after.lastHandoverSeq, 0);
    const Json detail = ChainViews(connection_, config_.policy).detail(after);
    ASSERT_EQ(detail["handovers"].size(), 1u);
    EXPECT_DOUBLE_EQ(detail["handovers"][0]["handover_s"].get<double>(), 7.0);
    EXPECT_EQ(detail["handovers"][0]["predecessor_seq"], 0);
    EXPECT_EQ(detail["chain"]["last_handover_seq"], 0);
    EXPECT_EQ(detail["jobs"][1]["interruption_s"], -7); // the successor started 7 s before the end
}

// srun answers TERM by force-terminating its step: a predecessor whose training runs
// under srun is signalled through its steps only, which spares srun.
TEST_F(ProvisionerTest, HandoverSignalsOnlyTheStepsOfATrainingUnderSrun)
{
    const ChainRow chain = chainWithRunningJob(1);
    const auto report = [&](const std::string& kind, const std::string& step, const Json& requeue) {
        static int count = 0;
        tables_.events.insert("key-" + std::to_string(++count), kind, chain.name, 1,
            Json { { "step", step }, { "requeue_count", requeue } }, 0);
    };
    report("step_start", "batch", 0);
    EXPECT_EQ(tables_.events.checkpointSignalScope(1), SignalScope::Full) << "training in the batch step";
    report("step_start", "0", 0);
    report("task_exit", "0", 0);
    EXPECT_EQ(tables_.events.checkpointSignalScope(1), SignalScope::Full) << "the srun step has ended";
    report("step_start", "1", "not a number"); // a hint: read as the first run
    EXPECT_EQ(tables_.events.checkpointSignalScope(1), SignalScope::Steps) << "an srun step runs";
    report("step_start", "batch", 1);
    EXPECT_EQ(tables_.events.checkpointSignalScope(1), SignalScope::Full) << "requeued: the first run's steps ended";
    report("step_start", "0", 1);
    EXPECT_EQ(tables_.events.checkpointSignalScope(1), SignalScope::Steps);
    EXPECT_EQ(tables_.events.checkpointSignalScope(2), SignalScope::Full) << "another job";

    tick(std::make_shared<AlwaysSubmit>());
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    ASSERT_EQ(cluster_.signals.size(), 1u);
    EXPECT_EQ(cluster_.signals[0], (ScriptedCluster::Signal { 1, "TERM", SignalScope::Steps }));
    EXPECT_EQ(ChainViews(connection_, config_.policy).detail(*tables_.chains.find(chain.id))["decisions"][0]["outcome"], // the newest first
        "predecessor asked in its chain directory, TERM (steps) after 30 s");
}

// A tick's submissions are recorded in one statement: the intents become submitted jobs and the
// policy's predictions are kept for the successors' real waits.
TEST_F(ProvisionerTest, SubmittedJobsAndTheirPredictionsAreRecordedTogether)
{
    const ChainRow first = chainWithRunningJob(1);
    const std::string key = Submitter::submissionKey(first, 1);
    ASSERT_EQ(
        tables_.submissions.recordIntents({ IntentRequest { first.id, ChainState::Running, 1, key, "policy" } }).size(),
        1u);
    tables_.submissions.recordSubmitted({});
    EXPECT_EQ(tables_.submissions.find(first.id, 1)->state, "intent");
    tables_.submissions.recordSubmitted({ SubmittedJob { key, first.id, 77, 120.0 } });
    const auto submitted = tables_.submissions.find(first.id, 1);
    EXPECT_EQ(submitted->state, "submitted");
    EXPECT_EQ(submitted->slurmJobId, 77);
    EXPECT_EQ(tables_.submissions.resolvePrediction(77, 100.0), 120.0);
    EXPECT_EQ(tables_.submissions.resolvePrediction(77, 100.0), std::nullopt) << "resolved once";
}

TEST_F(ProvisionerTest, CrashAfterSbatchIsReconciledNotResubmitted)
{
    const ChainRow chain = chainWithRunningJob(2);
    cluster_.failAfterSubmit = true; // sbatch ran, but its job id was never written down
    EXPECT_NO_THROW(tick(std::make_shared<AlwaysSubmit>()));
    cluster_.failAfterSubmit = false;
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    const auto pending = tables_.submissions.find(chain.id, 1);
    ASSERT_TRUE(pending);
    EXPECT_NE(pending->state, "submitted");

    // The next tick (a restarted batond) finds the job by its key in the queue.
    cluster_.now += 1;
    tick(std::make_shared<AlwaysSubmit>());
    EXPECT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(tables_.submissions.find(chain.id, 1)->state, "submitted");
    EXPECT_EQ(tables_.submissions.find(chain.id, 1)->slurmJobId, cluster_.jobs.back().id);
}

TEST_F(ProvisionerTest, IntentWithoutJobIsSubmittedOnceAfterTheGrace)
{
    const ChainRow chain = chainWithRunningJob(3);
    // batond died between writing the intent and running sbatch.
    ASSERT_TRUE(forceState(chain.id, ChainState::Running, ChainState::SuccessorPending));
    ASSERT_TRUE(tables_.submissions.recordIntent(chain.id, 1, Submitter::submissionKey(chain, 1), "policy"));
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
        EXPECT_EQ(tables_.submissions.find(chain.id, attempt + 1)->reason, "retry");
        failing = cluster_.jobs.back().id;
        cluster_.start(failing);
        // As it starts, the retry reports the newest checkpoint, which job 4 wrote: that is no progress
        // of the retry's own.
        tables_.checkpoints.record(chain.id, failing,
            Json { { "name", "ckpt-000000000100" }, { "iteration", 100 }, { "created_unix", cluster_.now },
                { "total_bytes", 10 }, { "job_id", 4 } },
            "/chains/x");
        tick();
        EXPECT_EQ(stateOf(chain), ChainState::Running);
        cluster_.end(failing, "FAILED");
    }
    cluster_.now += 30;
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Failed);
    EXPECT_NE(tables_.chains.find(chain.id)->reason->find("without a checkpoint; retry budget of 2 spent"),
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
    EXPECT_EQ(tables_.submissions.find(chain.id, 1)->reason, "node_failure");
    EXPECT_EQ(tables_.chains.find(chain.id)->retries, 0);
    // The job runs as batond's seq, and restores without a handover wait.
    EXPECT_EQ(cluster_.submissions[0].seq, 1);
    EXPECT_EQ(cluster_.submissions[0].args.back(), "--baton-handover-wait=0");

    const std::int64_t second = cluster_.jobs.back().id;
    cluster_.start(second);
    tick();
    cluster_.end(second, "NODE_FAIL");
    cluster_.now += 30;
    tick();
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_EQ(tables_.submissions.find(chain.id, 2)->reason, "retry");
    EXPECT_EQ(tables_.chains.find(chain.id)->retries, 1);
    EXPECT_EQ(cluster_.submissions[1].seq, 2);
    EXPECT_EQ(cluster_.submissions[1].args.back(), "--baton-handover-wait=0");

    // A job that keeps bringing its node down spends the budget at every later failure (free, then
    // charged, charged and not free again): it stops after retry_budget (2) more nodes.
    for (int failure = 3; failure <= 4; ++failure) {
        const std::int64_t job = cluster_.jobs.back().id;
        cluster_.start(job);
        tick();
        cluster_.end(job, "NODE_FAIL");
        cluster_.now += 30;
        tick();
        if (failure == 3) {
            ASSERT_EQ(cluster_.submissions.size(), 3u);
            EXPECT_EQ(tables_.submissions.find(chain.id, 3)->reason, "retry") << "not free after a charged one";
            EXPECT_EQ(tables_.chains.find(chain.id)->retries, 2);
        }
    }
    EXPECT_EQ(cluster_.submissions.size(), 3u);
    EXPECT_EQ(stateOf(chain), ChainState::Failed) << "four nodes, not eight";
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
    const ChainRow after = *tables_.chains.find(chain.id);
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
    EXPECT_EQ(tables_.chains.find(chain.id)->seq, 1);
}

TEST_F(ProvisionerTest, TrainingDoneCancelsThePendingSuccessor)
{
    const ChainRow chain = chainWithRunningJob(5);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    tables_.checkpoints.record(chain.id, 5,
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

// A resumed chain submits its next job again: the successor withdrawn at the pause gave its seq back,
// so the new job's row is written (it was refused as "a second job of seq 1", every tick).
TEST_F(ProvisionerTest, AResumedChainSubmitsTheSeqItsPauseWithdrew)
{
    const ChainRow chain = chainWithRunningJob(7);
    const auto always = std::make_shared<AlwaysSubmit>();
    tick(always);
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    const std::int64_t withdrawn = cluster_.jobs.back().id;
    tick(always); // its pending row is written
    ASSERT_TRUE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::Pause, "test"));
    tick(always);
    EXPECT_EQ(cluster_.cancelled, std::vector<std::int64_t> { withdrawn });
    ASSERT_TRUE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::Resume, "test"));
    cluster_.now += 10;
    tick(always);
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    tick(always);
    const std::int64_t again = cluster_.jobs.back().id;
    bool withdrawnRow = false, againRow = false;
    for (const JobRow& job : tables_.jobs.ofChain(chain.id)) {
        withdrawnRow = withdrawnRow || (job.slurmJobId == withdrawn && job.seq == 1 && job.withdrawn);
        againRow = againRow || (job.slurmJobId == again && job.seq == 1 && !job.withdrawn);
    }
    EXPECT_TRUE(withdrawnRow) << "the withdrawn successor's row gives seq 1 back";
    EXPECT_TRUE(againRow) << "the new successor's row is written";
}

} // namespace

namespace {

using namespace baton::service;
using namespace baton::service::fixture;

// Submits when the predecessor (or, for a second successor, the successor as it would run) has at most
// `seconds` left.
class SubmitWithin final : public baton::sim::Policy {
public:
    explicit SubmitWithin(std::int64_t seconds)
        : seconds_(seconds)
    { }
    std::string name() const override { return "within"; }
    std::size_t firstSubmit(std::span<const baton::sim::DecisionPoint> points) const override
    {
        for (std::size_t i = 0; i < points.size(); ++i)
            if (points[i].remaining <= seconds_)
                return i;
        return points.size();
    }

private:
    std::int64_t seconds_;
};

std::vector<std::string> submissionReasons(baton::db::Connection& connection, std::int64_t chainId)
{
    static constexpr baton::db::Statement reasons { "test_submission_reasons",
        "SELECT seq || ':' || reason || ':' || state FROM submissions WHERE chain_id = $1 ORDER BY seq", true };
    const auto result = connection.exec(reasons, baton::db::Params(chainId));
    std::vector<std::string> rows;
    for (int row = 0; row < result.rows(); ++row)
        rows.emplace_back(result.text(row, 0));
    return rows;
}

} // namespace

// successors_in_flight = 2: while the successor waits, the policy decides on the job after it as on a
// predecessor ending one limit later; when the successor takes over, the second is its successor.
TEST_F(ProvisionerTest, ASecondSuccessorQueuesBehindAWaitingOne)
{
    config_.successorsInFlight = 2;
    const ChainRow chain = chainWithRunningJob(61); // 3,600 s limit, 3,540 s left
    const auto policy = std::make_shared<SubmitWithin>(4000);
    Provisioner provisioner(config_, tables_, cluster_, metrics_, ChainPolicies(policy), timeOnlyDecisionPoints);
    provisioner.tick();
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    provisioner.tick(); // the second: 3,540 + 3,600 s ahead, more than the policy's 4,000
    EXPECT_EQ(cluster_.submissions.size(), 1u);
    cluster_.now += 3200; // 340 s left: the successor as it would run has 3,940 s left
    provisioner.tick();
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_EQ(cluster_.submissions.back().key, Submitter::submissionKey(chain, 2));
    // Its seq is batond's, whichever of the two starts first.
    EXPECT_EQ(cluster_.submissions.back().seq, 2);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    EXPECT_EQ(submissionReasons(connection_, chain.id),
        (std::vector<std::string> { "1:policy:submitted", "2:ahead:submitted" }));
    const std::int64_t successor = cluster_.jobs[1].id, second = cluster_.jobs[2].id; // in submission order
    provisioner.tick();
    EXPECT_EQ(cluster_.submissions.size(), 2u) << "two in flight at most";
    const Json shown = ChainViews(connection_, "checkpoint-aware").summary(*tables_.chains.find(chain.id));
    EXPECT_EQ(shown["pending_job"], successor);
    EXPECT_EQ(shown["second_pending_job"], second);

    // The successor starts: handover; the second stays queued and follows it.
    cluster_.now += 100;
    cluster_.start(successor);
    provisioner.tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    cluster_.now += 20;
    cluster_.end(61, "COMPLETED");
    provisioner.tick();
    EXPECT_EQ(tables_.chains.find(chain.id)->seq, 1);
    provisioner.tick();
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending) << "the queued second is the new successor";
    EXPECT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_TRUE(cluster_.cancelled.empty());
    cluster_.now += 3000;
    cluster_.start(second);
    provisioner.tick();
    EXPECT_EQ(stateOf(chain), ChainState::Handover);
    EXPECT_EQ(cluster_.signals.back().jobId, successor);
}

// A second successor goes when the one it follows goes (cancelled while queued), when the training
// finishes, and when it starts first; one service with a single successor in flight never queues it.
TEST_F(ProvisionerTest, ASecondSuccessorIsWithdrawnWithTheOneItFollows)
{
    const auto always = std::make_shared<AlwaysSubmit>();
    {
        config_.successorsInFlight = 1;
        const ChainRow one = chainWithRunningJob(71, "-one");
        tick(always);
        tick(always);
        EXPECT_EQ(submissionReasons(connection_, one.id), (std::vector<std::string> { "1:policy:submitted" }));
    }
    config_.successorsInFlight = 2;
    const ChainRow chain = chainWithRunningJob(72);
    tick(always);
    tick(always);
    ASSERT_EQ(submissionReasons(connection_, chain.id),
        (std::vector<std::string> { "1:policy:submitted", "2:ahead:submitted" }));
    const std::int64_t successor = cluster_.jobs[cluster_.jobs.size() - 2].id, second = cluster_.jobs.back().id;

    // The successor is cancelled by hand while queued: the second goes too, and the chain submits anew.
    cluster_.cancel(successor, 0);
    cluster_.cancelled.clear();
    tick(std::make_shared<NeverSubmit>());
    EXPECT_EQ(cluster_.cancelled, std::vector<std::int64_t> { second });
    EXPECT_EQ(stateOf(chain), ChainState::Running);
    EXPECT_EQ(submissionReasons(connection_, chain.id),
        (std::vector<std::string> { "1:policy:cancelled", "2:ahead:cancelled" }));
    tick(always);
    tick(always);
    ASSERT_EQ(submissionReasons(connection_, chain.id),
        (std::vector<std::string> { "1:policy:submitted", "2:ahead:submitted" }));

    // The second starts before the successor it follows: it is cancelled, the chain keeps the first.
    const std::int64_t early = cluster_.jobs.back().id;
    cluster_.cancelled.clear();
    cluster_.now += 10;
    cluster_.start(early);
    tick(std::make_shared<NeverSubmit>());
    EXPECT_EQ(cluster_.cancelled, std::vector<std::int64_t> { early });
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
    EXPECT_EQ(submissionReasons(connection_, chain.id),
        (std::vector<std::string> { "1:policy:submitted", "2:ahead:cancelled" }));

    // Queued again; then the training finishes in the current job: both successors are cancelled.
    tick(always);
    ASSERT_EQ(submissionReasons(connection_, chain.id),
        (std::vector<std::string> { "1:policy:submitted", "2:ahead:submitted" }));
    tables_.checkpoints.record(chain.id, 72,
        Json { { "name", "ckpt-000000000009" }, { "iteration", 9 }, { "training_done", true } }, "/c");
    cluster_.cancelled.clear();
    cluster_.now += 10;
    cluster_.end(72, "COMPLETED");
    tick(std::make_shared<NeverSubmit>());
    EXPECT_EQ(stateOf(chain), ChainState::Finished);
    EXPECT_EQ(cluster_.cancelled.size(), 2u);
    EXPECT_EQ(submissionReasons(connection_, chain.id),
        (std::vector<std::string> { "1:policy:cancelled", "2:ahead:cancelled" }));
}

namespace {

// Submits at once and keeps what each decision saw of the chain's last successor.
class RecordsLastSuccessorWait final : public baton::sim::Policy {
public:
    std::string name() const override { return "records"; }
    std::size_t firstSubmit(std::span<const baton::sim::DecisionPoint> points) const override
    {
        for (const auto& p : points) {
            seen.push_back(p.lastSuccessorWait);
            limits.push_back(p.limit);
        }
        return 0;
    }
    mutable std::vector<double> seen;
    mutable std::vector<std::int64_t> limits; // the running job's, which bounds the lead floor
};

// A chain begun with plain `sbatch --baton` whose script holds a directive that would make batond's sbatch
// wait (sbatch reads #SLURM lines and drops backslashes): quarantined when it is registered, with the
// reason for its owner, and no successor is ever submitted with that script.
TEST_F(ProvisionerTest, APlainSbatchChainWhoseScriptWouldWaitIsQuarantinedWhenRegistered)
{
    cluster_.script = "#!/bin/bash\n#SBATCH --time=60\n#SLURM --wa\\it\ntrain\n";
    const ClusterJob first = runningJob(cluster_.nextId++, 65534);
    tables_.events.insert("waits-" + std::to_string(first.id), "step_start", "waits", first.id,
        Json { { "chain", "waits" }, { "step", "batch" }, { "job_id", first.id } }, 0);
    tick(std::make_shared<AlwaysSubmit>());
    const auto chain = tables_.chains.find(65534, "waits");
    ASSERT_TRUE(chain);
    EXPECT_EQ(chain->state, ChainState::Quarantined);
    EXPECT_NE(chain->reason.value_or("").find("'--wait' is refused"), std::string::npos) << chain->reason.value_or("");
    tick(std::make_shared<AlwaysSubmit>());
    EXPECT_TRUE(cluster_.submissions.empty());
}

// The predecessor's node died while its successor was queued, and again while a started successor waited
// for its handover checkpoint: batond writes the chain's end marker as the owner each time, so that the
// successor restores at once instead of waiting out BATON_HANDOVER_WAIT for a checkpoint a dead node
// never writes (the checkpointer's side: handover_test).
TEST_F(ProvisionerTest, ADeadPredecessorsEndIsMarkedForItsWaitingSuccessor)
{
    if (::getuid() != 0)
        GTEST_SKIP() << "needs root to write as the chain's owner";
    baton::test::TempDir dir;
    const ChainRow chain = chainInOwnersDirectory(dir.path(), 1);
    const auto marker = [&] { return jsonFileAt(dir.path() / baton::contract::kHandoverEndedFile); };
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(stateOf(chain), ChainState::SuccessorPending);
    EXPECT_TRUE(marker().is_null()) << "nothing while the predecessor runs";

    cluster_.now += 30;
    cluster_.end(1, "NODE_FAIL");
    tick();
    EXPECT_EQ(marker(), (Json { { "version", 1 }, { "seq", 0 }, { "job_id", 1 }, { "state", "NODE_FAIL" },
                            { "time_unix", cluster_.now } }));
    EXPECT_EQ(ownerOf(dir.path() / baton::contract::kHandoverEndedFile), 65534) << "written as the owner";

    // The successor runs and becomes the current job; its own successor starts while it trains, and
    // then its node dies during the handover.
    const std::int64_t successor = cluster_.jobs.back().id;
    cluster_.start(successor);
    tick();
    ASSERT_EQ(tables_.chains.find(chain.id)->seq, 1);
    tick(std::make_shared<AlwaysSubmit>());
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    ASSERT_EQ(stateOf(chain), ChainState::Handover);
    cluster_.now += 5;
    cluster_.end(successor, "NODE_FAIL");
    tick();
    EXPECT_EQ(marker()["seq"], 1);
    EXPECT_EQ(marker()["job_id"], successor);
}

// max_live_chains_per_user counts every live chain, also one begun with plain `sbatch --baton`: a user at
// the cap gets no new chain registered from a job, and costs the tick no read of its batch script.
TEST_F(ProvisionerTest, APlainSbatchChainOverTheLiveChainCapIsNotRegistered)
{
    config_.maxLiveChainsPerUser = 1;
    chainWithRunningJob(1); // the owner's one live chain
    const ClusterJob plain = runningJob(cluster_.nextId++, 65534, 10);
    tables_.events.insert("capped-" + std::to_string(plain.id), "step_start", "capped", plain.id,
        Json { { "chain", "capped" }, { "step", "batch" }, { "job_id", plain.id } }, 0);
    tick();
    EXPECT_FALSE(tables_.chains.find(65534, "capped"));
    EXPECT_EQ(cluster_.batchScriptReads, 0);
    EXPECT_EQ(tables_.chains.liveCount(65534), 1);

    config_.maxLiveChainsPerUser = 2; // room again: the job's next report registers it
    tables_.events.insert("capped-2-" + std::to_string(plain.id), "step_start", "capped", plain.id,
        Json { { "chain", "capped" }, { "step", "0" }, { "job_id", plain.id } }, 0);
    tick();
    EXPECT_TRUE(tables_.chains.find(65534, "capped"));
    EXPECT_EQ(tables_.chains.liveCount(65534), 2);
}

// One owner's sbatch hangs (its working directory on a stalled file system): another owner's successor,
// due in the same tick, is submitted at once, not after it.
TEST_F(ProvisionerTest, OneOwnersHungSbatchDelaysNoOtherOwnersSuccessor)
{
    const ChainRow slow = chainWithRunningJob(1, "-slow");
    const ChainRow other = chainOfAnotherOwner(2, "other-owner");
    // The slow owner's sbatch hangs until the other owner's has gone in (or 10 s, as it would on a tick
    // that runs them one after the other).
    bool otherWentInMeanwhile = false;
    cluster_.beforeSubmit = [&](uid_t owner) {
        if (owner != 65534)
            return;
        std::unique_lock lock(cluster_.mutex);
        otherWentInMeanwhile = cluster_.submitted.wait_for(
            lock, std::chrono::seconds(10), [&] { return cluster_.submittedBy.contains(1); });
    };
    tick(std::make_shared<AlwaysSubmit>());
    EXPECT_TRUE(otherWentInMeanwhile) << "the other owner's sbatch waited for the hung one";
    EXPECT_EQ(cluster_.submittedBy, (std::set<uid_t> { 1, 65534 }));
    EXPECT_EQ(stateOf(slow), ChainState::SuccessorPending);
    EXPECT_EQ(stateOf(other), ChainState::SuccessorPending);
}

// A spooled checkpoint hint is read once the chain's current job has ended, and then not every tick while
// the chain waits for its successor (the plugin writes the spool only while the job's tasks run); what is
// stored of a hint is the summary batond uses, not the rest of the owner's manifest.
TEST_F(ProvisionerTest, TheSpoolIsReadOncePerEndedJobAndOnlyItsSummaryKept)
{
    if (::getuid() != 0)
        GTEST_SKIP() << "needs root to read as the chain's owner";
    baton::test::TempDir dir;
    const ChainRow chain = chainWithRunningJob(1);
    tables_.chains.setChainDir(chain.id, dir.path().string());
    const auto spool = [&](int iteration) {
        const auto spoolDir = dir.path() / ".baton-spool";
        std::filesystem::create_directories(spoolDir);
        const Json event { { "job_id", 1 },
            { "checkpoint", { { "name", "ckpt-00000000000" + std::to_string(iteration) }, { "iteration", iteration },
                                { "created_unix", 1000 + iteration }, { "total_bytes", 10 },
                                { "padding", std::string(100000, 'x') } } } };
        std::ofstream(spoolDir / "events.jsonl", std::ios::app) << event.dump() << "\n";
        for (const auto& path : { dir.path(), spoolDir, spoolDir / "events.jsonl" })
            ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0) << path;
    };
    // One service across the ticks, as batond keeps one (it remembers whose spool it read).
    const std::shared_ptr<const baton::sim::Policy> always = std::make_shared<AlwaysSubmit>();
    Provisioner service(config_, tables_, cluster_, metrics_, always, timeOnlyDecisionPoints);
    service.tick();
    ASSERT_EQ(stateOf(chain), ChainState::SuccessorPending);
    spool(5);
    cluster_.end(1, "COMPLETED");
    service.tick();
    ASSERT_TRUE(tables_.checkpoints.latest(chain.id));
    EXPECT_EQ(tables_.checkpoints.latest(chain.id)->iteration, 5) << "read once the job ended";
    const auto stored = connection_.exec(baton::db::Statement { "test_manifest_size",
        "SELECT octet_length(manifest::text) FROM checkpoints WHERE chain_id = $1" }, baton::db::Params(chain.id));
    EXPECT_LT(stored.int64(0, 0), 1000) << "only the summary is kept, not the 100 kB the manifest carried";

    spool(6); // nothing the plugin would write now: not read while the chain waits
    service.tick();
    service.tick();
    EXPECT_EQ(tables_.checkpoints.latest(chain.id)->iteration, 5);
    EXPECT_TRUE(std::filesystem::exists(dir.path() / ".baton-spool" / "events.jsonl"));
}

// The owner cancels the chain while the tick's sbatch of its successor is under way: the job that sbatch
// made, newer than the queue the tick read, is cancelled by the next tick instead of being left to run.
TEST_F(ProvisionerTest, ACancelDuringAnInFlightSbatchCancelsTheJobItMade)
{
    const ChainRow chain = chainWithRunningJob(1);
    baton::db::Connection api(conninfo_); // the HTTP worker's connection
    Tables http(api);
    cluster_.beforeSubmit = [&](uid_t) {
        const ChainRow now = *http.chains.find(chain.id);
        ASSERT_TRUE(http.chains.transition(now, ChainEvent::Cancel, "cancelled by nobody"));
        http.chains.setWithdrawJobs(chain.id, true);
    };
    tick(std::make_shared<AlwaysSubmit>());
    cluster_.beforeSubmit = nullptr;
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    const std::int64_t successor = cluster_.jobs.back().id;
    tick();
    EXPECT_NE(std::find(cluster_.cancelled.begin(), cluster_.cancelled.end(), successor), cluster_.cancelled.end())
        << "the successor sbatch made during the cancel is cancelled";
    EXPECT_NE(std::find(cluster_.cancelled.begin(), cluster_.cancelled.end(), 1), cluster_.cancelled.end());
    tick();
    EXPECT_EQ(stateOf(chain), ChainState::Cancelled);
}

// One owner's scancel hangs (a stopped child, a slow slurmctld answer for them): another owner's handover
// TERM, due in the same tick, is sent meanwhile, not after it.
TEST_F(ProvisionerTest, OneOwnersHungScancelDelaysNoOtherOwnersHandoverSignal)
{
    const ChainRow slow = chainWithRunningJob(1, "-slow");
    const ChainRow other = chainOfAnotherOwner(2, "other-owner-term");
    tick(std::make_shared<AlwaysSubmit>()); // both successors queued
    for (std::size_t i = cluster_.jobs.size() - 2; i < cluster_.jobs.size(); ++i)
        cluster_.start(cluster_.jobs[i].id);
    bool otherSignalledMeanwhile = false;
    cluster_.beforeSignal = [&](uid_t owner) {
        if (owner != 65534)
            return;
        std::unique_lock lock(cluster_.mutex);
        otherSignalledMeanwhile = cluster_.submitted.wait_for(
            lock, std::chrono::seconds(10), [&] { return cluster_.signalledBy.contains(1); });
    };
    tick();
    EXPECT_TRUE(otherSignalledMeanwhile) << "the other owner's TERM waited for the hung scancel";
    EXPECT_EQ(cluster_.signalledBy, (std::set<uid_t> { 1, 65534 }));
    EXPECT_EQ(stateOf(slow), ChainState::Handover);
    EXPECT_EQ(stateOf(other), ChainState::Handover);
}

// batond submits a chain's jobs as its owner: a root job started with plain `sbatch --baton` registers no
// chain (batond would submit its successors as root), and no read of its batch script is made.
TEST_F(ProvisionerTest, AJobOfRootRegistersNoChain)
{
    const ClusterJob rootJob = runningJob(cluster_.nextId++, 0, 10);
    tables_.events.insert("root-" + std::to_string(rootJob.id), "step_start", "as-root", rootJob.id,
        Json { { "chain", "as-root" }, { "step", "batch" }, { "job_id", rootJob.id } }, 0);
    tick();
    EXPECT_FALSE(tables_.chains.find(0, "as-root"));
    EXPECT_EQ(cluster_.batchScriptReads, 0);
}

// An operator requeues a job of a seq the chain has moved past (`scontrol requeue` after it ended): it
// would train beside the chain's current job from an old checkpoint, so the next tick cancels it; the
// current job is left alone.
TEST_F(ProvisionerTest, AnEarlierJobRequeuedAfterTheChainMovedOnIsCancelled)
{
    const ChainRow first = chainWithRunningJob(1);
    static constexpr baton::db::Statement moveOn { "test_move_on", "UPDATE chains SET seq = 2 WHERE id = $1" };
    connection_.exec(moveOn, baton::db::Params(first.id));
    const ChainRow chain = *tables_.chains.find(first.id);
    cluster_.end(1, "COMPLETED");
    ClusterJob current = runningJob(cluster_.nextId++, 65534, 30);
    cluster_.jobs.back().comment = current.comment = Submitter::submissionKey(chain, 2);
    tables_.jobs.upsert(chain.id, 2, current);
    ClusterJob requeued = current;
    requeued.id = cluster_.nextId++;
    requeued.state = "PENDING";
    requeued.startTime = 0;
    requeued.comment = Submitter::submissionKey(chain, 1);
    cluster_.jobs.push_back(requeued);
    ClusterJob othersLookalike = requeued; // another user's job with the chain's key in its comment
    othersLookalike.id = cluster_.nextId++;
    othersLookalike.userId = 1;
    cluster_.jobs.push_back(othersLookalike);
    tick();
    EXPECT_EQ(cluster_.cancelled, (std::vector<std::int64_t> { requeued.id }));
    EXPECT_EQ(stateOf(chain), ChainState::Running);
}

// `batonctl preempt` only records the request (no scancel in an HTTP worker); the tick sends the running
// job its TERM as the owner, again next tick when scancel failed, and forgets the request once sent.
TEST_F(ProvisionerTest, APreemptIsSentByTheTickUntilScancelDeliversIt)
{
    const ChainRow chain = chainWithRunningJob(1);
    tables_.chains.setPreemptRequested(chain.id, true);
    cluster_.failingSignals = 1;
    tick();
    EXPECT_TRUE(cluster_.signals.empty());
    EXPECT_TRUE(tables_.chains.find(chain.id)->preemptRequested) << "kept: scancel failed";
    tick();
    EXPECT_EQ(cluster_.signals, (std::vector<ScriptedCluster::Signal> { { 1, "TERM", SignalScope::Full } }));
    EXPECT_FALSE(tables_.chains.find(chain.id)->preemptRequested);
    tick();
    EXPECT_EQ(cluster_.signals.size(), 1u) << "sent once";
}

// A job to take its final checkpoint and exit is asked in its chain directory first, as its owner, and
// sent TERM only handover_signal_delay later if it still runs: a launcher such as torchrun kills its ranks
// 30 s after it forwards a TERM (the checkpointer's side: session_test, torchrun_test). The delay counts
// from the handover's recorded start, also for a batond that took over meanwhile (a new instance a tick).
TEST_F(ProvisionerTest, AHandoverIsAskedInTheChainDirectoryBeforeItsTerm)
{
    if (::getuid() != 0)
        GTEST_SKIP() << "needs root to write as the chain's owner";
    baton::test::TempDir dir;
    const ChainRow chain = chainInOwnersDirectory(dir.path(), 1);
    const auto request = [&] { return jsonFileAt(dir.path() / baton::contract::kHandoverRequestFile); };
    tick(std::make_shared<AlwaysSubmit>());
    EXPECT_TRUE(request().is_null()) << "nothing while no successor runs";
    cluster_.now += 10;
    cluster_.start(cluster_.jobs.back().id);
    tick();
    ASSERT_EQ(stateOf(chain), ChainState::Handover);
    EXPECT_EQ(request(), (Json { { "version", 1 }, { "seq", 0 }, { "job_id", 1 }, { "time_unix", cluster_.now } }));
    EXPECT_EQ(ownerOf(dir.path() / baton::contract::kHandoverRequestFile), 65534) << "written as the owner";
    EXPECT_TRUE(cluster_.signals.empty()) << "TERM waits for the delay";
    EXPECT_EQ(ChainViews(connection_, config_.policy).detail(*tables_.chains.find(chain.id))["decisions"][0]["outcome"],
        "predecessor asked in its chain directory, TERM (full) after 30 s");

    cluster_.now += config_.handoverSignalDelay.count() - 1;
    tick();
    EXPECT_TRUE(cluster_.signals.empty());
    cluster_.now += 1;
    tick();
    EXPECT_EQ(cluster_.signals, (std::vector<ScriptedCluster::Signal> { { 1, "TERM", SignalScope::Full } }));
    tick();
    EXPECT_EQ(cluster_.signals.size(), 1u) << "sent once";
}

// `batonctl preempt` asks the same way; a job that ends on the request gets no TERM at all.
TEST_F(ProvisionerTest, APreemptIsAskedInTheChainDirectoryBeforeItsTerm)
{
    if (::getuid() != 0)
        GTEST_SKIP() << "needs root to write as the chain's owner";
    baton::test::TempDir dir;
    const ChainRow chain = chainInOwnersDirectory(dir.path(), 1);
    tables_.chains.setPreemptRequested(chain.id, true);
    const std::shared_ptr<const baton::sim::Policy> policy = std::make_shared<baton::sim::ReactivePolicy>();
    Provisioner provisioner(config_, tables_, cluster_, metrics_, policy, timeOnlyDecisionPoints);
    provisioner.tick();
    EXPECT_EQ(jsonFileAt(dir.path() / baton::contract::kHandoverRequestFile)["job_id"], 1);
    EXPECT_TRUE(cluster_.signals.empty());
    EXPECT_TRUE(tables_.chains.find(chain.id)->preemptRequested) << "TERM still to come";
    cluster_.now += config_.handoverSignalDelay.count();
    provisioner.tick();
    EXPECT_EQ(cluster_.signals, (std::vector<ScriptedCluster::Signal> { { 1, "TERM", SignalScope::Full } }));
    EXPECT_FALSE(tables_.chains.find(chain.id)->preemptRequested);

    // Preempted again, it takes its final checkpoint on the request and ends within the delay.
    const ChainRow second = chainInOwnersDirectory(dir.path(), 2, "-second");
    tables_.chains.setPreemptRequested(second.id, true);
    provisioner.tick();
    cluster_.now += 5;
    cluster_.end(2, "COMPLETED");
    cluster_.now += config_.handoverSignalDelay.count();
    provisioner.tick();
    EXPECT_EQ(cluster_.signals.size(), 1u) << "no TERM for a job that ended";
}

} // namespace

// The policy sees how long the running job waited once the chain submitted it as a successor (the outcome
// of its own last decision, which checkpoint-aware reads): nothing for the owner's first job, nor for a
// second successor's stand-in, which has not started.
TEST_F(ProvisionerTest, ThePolicySeesHowLongTheLastSuccessorWaited)
{
    const ChainRow chain = chainWithRunningJob(71);
    const auto policy = std::make_shared<RecordsLastSuccessorWait>();
    {
        Provisioner provisioner(
            config_, tables_, cluster_, metrics_, ChainPolicies(policy), timeOnlyDecisionPoints);
        provisioner.tick();
        ASSERT_EQ(cluster_.submissions.size(), 1u);
        ASSERT_EQ(policy->seen.size(), 1u);
        EXPECT_TRUE(std::isnan(policy->seen.back())) << "the owner's first job";
        EXPECT_EQ(policy->limits.back(), 3600);

        // The successor starts 7 s after it went in and takes over.
        const std::int64_t successor = cluster_.jobs.back().id;
        cluster_.now += 7;
        cluster_.start(successor);
        provisioner.tick();
        ASSERT_EQ(stateOf(chain), ChainState::Handover);
        cluster_.end(71, "COMPLETED");
        for (int i = 0; i < 4 && cluster_.submissions.size() < 2; ++i)
            provisioner.tick();
        ASSERT_EQ(tables_.chains.find(chain.id)->seq, 1);
        ASSERT_EQ(cluster_.submissions.size(), 2u);
        EXPECT_DOUBLE_EQ(policy->seen.back(), 7.0);
    }
    // With two in flight, the decision behind the waiting successor (on its stand-in, not started).
    config_.successorsInFlight = 2;
    Provisioner provisioner(config_, tables_, cluster_, metrics_, ChainPolicies(policy), timeOnlyDecisionPoints);
    provisioner.tick();
    ASSERT_EQ(cluster_.submissions.size(), 3u);
    EXPECT_TRUE(std::isnan(policy->seen.back())) << "a second successor's stand-in";
}
