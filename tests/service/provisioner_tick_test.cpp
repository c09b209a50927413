// What the chain state machine's tick reads and writes: job rows only when they changed, waits once per
// interval, the live chains' cache, gauges, the history's retention.
#include "provisioner_fixture.hpp"

namespace {

using namespace baton::service;
using namespace baton::service::fixture;

// A running chain whose job did not change: the tick writes no job row, and the policy's "wait" is
// written once per interval, not once per tick.
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
        config_, tables_, cluster_, metrics_, ChainPolicies(std::make_shared<NeverSubmit>()), timeOnlyDecisionPoints);
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
    EXPECT_EQ(tables_.jobs.ofChain(chain.id).front().state, "TIMEOUT");
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

// A chain that names its own policy is decided by it, and its decisions say so; the others follow the
// service's, and a change of a chain's policy counts from the next tick.
TEST_F(ProvisionerTest, AChainIsDecidedByItsOwnPolicy)
{
    config_.policy = "avg";
    const ChainRow own = chainWithRunningJob(31, "-own");
    const ChainRow follower = chainWithRunningJob(32, "-follows");
    tables_.chains.setPolicy(own.id, "predict");
    const ChainPolicies policies(std::make_shared<NeverSubmit>(), { { "predict", std::make_shared<AlwaysSubmit>() } });
    const auto decided = [&](const ChainRow& chain) {
        return std::string(connection_
            .exec(baton::db::Statement { "test_decided_by",
                      "SELECT string_agg(policy || ':' || action, ',' ORDER BY id) FROM decisions WHERE chain_id = $1",
                      true },
                baton::db::Params(chain.id))
                .text(0, 0));
    };
    Provisioner provisioner(config_, tables_, cluster_, metrics_, policies, timeOnlyDecisionPoints);
    provisioner.tick();
    EXPECT_EQ(stateOf(own), ChainState::SuccessorPending);
    EXPECT_EQ(stateOf(follower), ChainState::Running);
    EXPECT_EQ(decided(own), "predict:submit");
    EXPECT_EQ(decided(follower), "avg:wait");

    // The follower names the same policy: the next tick submits its successor.
    tables_.chains.setPolicy(follower.id, "predict");
    cluster_.now += 30;
    provisioner.tick();
    EXPECT_EQ(stateOf(follower), ChainState::SuccessorPending);
    EXPECT_EQ(decided(follower), "avg:wait,predict:submit");
}

// The tick's set-based read sees what the per-chain reads see: the current and next job and
// submission, and the end of training.
TEST_F(ProvisionerTest, LiveChainsForTickMatchThePerChainReads)
{
    const ChainRow chain = chainWithRunningJob(11);
    ClusterJob second = cluster_.jobs.front();
    second.id = 12;
    cluster_.jobs.push_back(second);
    const ChainRow other = tables_.chains.create(65534, "nobody", "other", "/chains/other",
        Json { { "script", "#!/bin/bash\ntrain\n" }, { "workdir", "/tmp" } });
    tables_.jobs.upsert(other.id, 0, second);
    tick(std::make_shared<AlwaysSubmit>()); // successors submitted for both
    ASSERT_EQ(cluster_.submissions.size(), 2u) << "the spec is read for the submission";
    EXPECT_EQ(cluster_.submissions.back().scriptText, "#!/bin/bash\ntrain\n");
    tables_.checkpoints.record(other.id, std::nullopt,
        Json { { "name", "ckpt-000000000007" }, { "iteration", 7 }, { "training_done", true } }, "/c");
    LiveChainCache cache;
    const auto live = readLiveChains(connection_, cache);
    ASSERT_EQ(live.size(), 2u);
    for (const LiveChain& view : live) {
        const ChainRow row = *tables_.chains.find(view.chain.id);
        EXPECT_EQ(view.chain.state, row.state);
        EXPECT_TRUE(view.chain.spec.is_null()) << "specs are read when a job is submitted";
        EXPECT_EQ(view.trainingDone, tables_.checkpoints.trainingDone(row.id));
        ASSERT_TRUE(view.next.has_value());
        EXPECT_EQ(view.next->key, tables_.submissions.find(row.id, row.seq + 1)->key);
        EXPECT_EQ(view.current.has_value(), tables_.submissions.find(row.id, row.seq).has_value());
        std::size_t expectedJobs = 0;
        for (const JobRow& job : tables_.jobs.ofChain(row.id))
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
            EXPECT_EQ(chainView(kept[i].chain, "avg"), chainView(fresh[i].chain, "avg"));
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

    tables_.submissions.recordIntent(a.id, 1, Submitter::submissionKey(a, 1), "policy");
    EXPECT_TRUE(of(read(1), a)->next.has_value());
    connection_.execScript("UPDATE jobs SET state = 'COMPLETING', end_time = now() WHERE slurm_job_id = 42");
    EXPECT_EQ(of(read(1), b)->jobs.at(0).state, "COMPLETING");
    tables_.checkpoints.record(b.id, std::nullopt,
        Json { { "name", "ckpt-000000000009" }, { "iteration", 9 }, { "training_done", true } }, "/c");
    EXPECT_TRUE(of(read(1), b)->trainingDone);
    connection_.execScript("DELETE FROM submissions WHERE chain_id = " + std::to_string(a.id) + " AND seq = 1");
    EXPECT_FALSE(of(read(1), a)->next.has_value());
    // A new seq alone (the chain's own row) makes other rows the current and next job's.
    ASSERT_TRUE(tables_.chains.advance(*tables_.chains.find(a.id), ChainEvent::JobAdopted));
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
    tables_.jobs.upsert(std::vector<JobStore::Write> {
        { chain.id, 1, successor }, { chain.id, 0, ended }, { chain.id, 5, started } });
    const std::vector<JobRow> jobs = tables_.jobs.ofChain(chain.id);
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
    tables_.jobs.upsert({}); // nothing to write: no statement
}

// One provisioner through a chain's whole handover, as batond keeps it from tick to tick: what it kept
// of the chain is read again after each of its own changes.
TEST_F(ProvisionerTest, OneProvisionerFollowsAChainThroughHandover)
{
    const ChainRow chain = chainWithRunningJob(51);
    Provisioner provisioner(
        config_, tables_, cluster_, metrics_, ChainPolicies(std::make_shared<AlwaysSubmit>()), timeOnlyDecisionPoints);
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
    EXPECT_EQ(tables_.chains.find(chain.id)->seq, 1);
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
    Provisioner provisioner(config_, tables_, cluster_, metrics_,
        ChainPolicies(std::make_shared<baton::sim::ReactivePolicy>()), timeOnlyDecisionPoints);
    const auto checkpoint = [&](const ChainRow& chain, int iteration, std::int64_t ago) {
        tables_.checkpoints.record(chain.id, std::nullopt,
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
    const ChainRow history = tables_.chains.create(65534, "nobody", "history", "/chains/history", Json());
    ASSERT_TRUE(forceState(history.id, ChainState::Running, ChainState::Finished));
    Provisioner provisioner(config_, tables_, cluster_, metrics_,
        ChainPolicies(std::make_shared<baton::sim::ReactivePolicy>()), timeOnlyDecisionPoints);
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
    const ChainRow unseen = tables_.chains.create(65534, "nobody", "unseen", "/chains/unseen", Json());
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
    Provisioner service(config_, tables_, cluster_, metrics_, ChainPolicies(std::make_shared<baton::sim::ReactivePolicy>()),
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

} // namespace
