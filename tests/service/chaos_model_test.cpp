// The chaos test's schedule and invariant checks without a cluster: a seed gives one schedule, and each
// check flags a violation built by hand and passes the legal case next to it.
#include "chaos_model.hpp"

#include <gtest/gtest.h>

namespace {

using namespace baton::chaos;

TEST(ChaosSchedule, IsAFunctionOfTheSeed)
{
    const ScheduleOptions options;
    const auto a = makeSchedule(42, options);
    const auto b = makeSchedule(42, options);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, b);
    EXPECT_NE(makeSchedule(43, options), a);
    // Fixed values for one seed: a change of the generator (or of the standard library under it) that
    // would make a printed seed replay another schedule fails here.
    ASSERT_EQ(a.size(), 34u);
    EXPECT_EQ(describe(a[0]), "t+47.5s owner_action chain=10 other=6 variant=21");
    EXPECT_EQ(describe(a[1]), "t+55.2s operator_action chain=0 other=10 variant=33");
    EXPECT_EQ(describe(a[2]), "t+66.1s user_scancel_queued chain=0 other=10 variant=13");
}

TEST(ChaosSchedule, RespectsItsBounds)
{
    ScheduleOptions options;
    options.seconds = 3600;
    for (std::uint64_t seed = 1; seed <= 50; ++seed) {
        const auto schedule = makeSchedule(seed, options);
        std::map<FaultKind, int> counts;
        double lastOutageEnd = -1e9;
        double previous = 0;
        for (const Fault& fault : schedule) {
            EXPECT_GE(fault.atSeconds, options.warmupSeconds);
            EXPECT_LT(fault.atSeconds, options.seconds);
            EXPECT_GE(fault.atSeconds, previous + options.minGapSeconds - 1e-9);
            previous = fault.atSeconds;
            EXPECT_GE(fault.chain, 0);
            EXPECT_LT(fault.chain, options.chains);
            EXPECT_GE(fault.variant, 0);
            EXPECT_LT(fault.variant, 64);
            ++counts[fault.kind];
            if (isOutage(fault.kind)) {
                EXPECT_GE(fault.atSeconds - lastOutageEnd, options.outageSpacingSeconds) << describe(fault);
                lastOutageEnd = fault.atSeconds + fault.durationSeconds;
                previous = lastOutageEnd;
            }
        }
        EXPECT_LE(counts[FaultKind::PostgresRestart], options.maxPostgresRestarts);
        EXPECT_LE(counts[FaultKind::SlurmctldStop], options.maxSlurmctldStops);
        EXPECT_LE(counts[FaultKind::HostileManifest], options.maxHostileManifests);
        EXPECT_LE(counts[FaultKind::PlainSbatchChain], options.maxPlainSbatchChains);
        EXPECT_LE(counts[FaultKind::ForeignLocalDir], options.maxForeignLocalDirs);
        EXPECT_LE(counts[FaultKind::StoppedChild], options.maxStoppedChildren);
        EXPECT_LE(counts[FaultKind::SpoolFlood], options.maxSpoolFloods);
        EXPECT_LE(counts[FaultKind::EventFlood], options.maxEventFloods);
    }
    // Over many seeds every kind is drawn.
    std::set<FaultKind> seen;
    for (std::uint64_t seed = 1; seed <= 50; ++seed)
        for (const Fault& fault : makeSchedule(seed, ScheduleOptions {}))
            seen.insert(fault.kind);
    EXPECT_EQ(seen.size(), std::size(faultKindNames));
}

TEST(ChaosKeys, ParsesTheJobComment)
{
    EXPECT_EQ(parseKey("baton:12:3"), (std::pair<std::int64_t, int> { 12, 3 }));
    EXPECT_EQ(parseKey("baton:12:3:f00dtoken"), (std::pair<std::int64_t, int> { 12, 3 }));
    EXPECT_FALSE(parseKey("baton:12"));
    EXPECT_FALSE(parseKey("baton:x:3"));
    EXPECT_FALSE(parseKey("mine"));
    EXPECT_FALSE(parseKey("baton:-1:3"));
}

SlurmJob job(std::int64_t id, std::int64_t uid, std::string comment, std::string state, std::int64_t start,
    std::int64_t end)
{
    SlurmJob j;
    j.id = id;
    j.uid = uid;
    j.comment = std::move(comment);
    j.state = std::move(state);
    j.submit = start > 0 ? start - 1 : 100;
    j.start = start;
    j.end = end;
    return j;
}

const std::vector<DbChain> chains { DbChain { 1, 1001, "a", "running", 1, "", "" } };

TEST(ChaosInvariants, TwoTrainingsBeyondAHandoverAreFlagged)
{
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:0", "COMPLETED", 1000, 1100);
    slurm[11] = job(11, 1001, "baton:1:1", "RUNNING", 1080, 0);
    const std::vector<DbJob> rows { { 1, 0, 10 }, { 1, 1, 11 } };
    // A 20 s handover: allowed.
    EXPECT_TRUE(checkOverlaps(chains, rows, slurm, 1200, 90).empty());
    // The predecessor ran on for 200 s after its successor started.
    slurm[10].end = 1280;
    const auto found = checkOverlaps(chains, rows, slurm, 1300, 90);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].invariant, "two_trainings");
    // Two jobs that are not predecessor and successor may not overlap at all.
    slurm[10].end = 1100;
    slurm[12] = job(12, 1001, "baton:1:3", "RUNNING", 1090, 0);
    EXPECT_EQ(checkOverlaps(chains, rows, slurm, 1110, 90).size(), 2u); // 12 with 10 and with 11
    // Another user's job with the chain's key is not a training of the chain.
    slurm.erase(12);
    slurm[13] = job(13, 2002, "baton:1:2", "RUNNING", 1090, 0);
    EXPECT_TRUE(checkOverlaps(chains, rows, slurm, 1095, 90).empty());
    // A successor cancelled while it was queued never ran.
    slurm[14] = job(14, 1001, "baton:1:2", "CANCELLED", 0, 1095);
    EXPECT_TRUE(checkOverlaps(chains, rows, slurm, 1095, 90).empty());
}

// Where the chain's token is known, only batond's own key places an unrecorded job in the chain: the
// owner's own job with a look-alike comment (baton:<id>:<seq>, no token) is not one of its trainings.
TEST(ChaosInvariants, ALookAlikeKeyWithoutTheTokenIsNotATraining)
{
    const std::vector<DbChain> withToken { DbChain { 1, 1001, "a", "running", 0, "", "f00d" } };
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:0:f00d", "RUNNING", 1000, 0);
    slurm[11] = job(11, 1001, "baton:1:0", "RUNNING", 1010, 0);
    const std::vector<DbJob> rows { { 1, 0, 10 } };
    EXPECT_TRUE(checkOverlaps(withToken, rows, slurm, 1100, 90).empty());
    // With the token it is batond's submission for that seq, unrecorded yet: two trainings.
    slurm[11].comment = "baton:1:0:f00d";
    EXPECT_EQ(checkOverlaps(withToken, rows, slurm, 1100, 90).size(), 1u);
}

TEST(ChaosInvariants, TwoJobsForOneSeqAreFlagged)
{
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:0", "COMPLETED", 1000, 1100);
    slurm[11] = job(11, 1001, "baton:1:1", "RUNNING", 1080, 0);
    std::vector<DbJob> rows { { 1, 0, 10 }, { 1, 1, 11 } };
    EXPECT_TRUE(checkDuplicateSeq(chains, rows, slurm).empty());
    slurm[12] = job(12, 1001, "baton:1:1:token", "PENDING", 0, 0);
    auto found = checkDuplicateSeq(chains, rows, slurm);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].invariant, "duplicate_seq");
    // A forged key of another user is not a duplicate of the chain (checkForeignJobs sees it if adopted).
    slurm[12].uid = 2002;
    EXPECT_TRUE(checkDuplicateSeq(chains, rows, slurm).empty());
    // A job submitted for seq 1 recorded as seq 2.
    slurm.erase(12);
    slurm[13] = job(13, 1001, "baton:1:1", "PENDING", 0, 0);
    rows.push_back({ 1, 2, 13 });
    found = checkDuplicateSeq(chains, rows, slurm);
    EXPECT_EQ(found.size(), 2u); // two jobs with key seq 1, and job 13 recorded under seq 2
}

// A successor cancelled while queued never ran: the seq's next submission (with a key of its own) is no
// second job of that seq, in the queue or among the rows.
TEST(ChaosInvariants, AWithdrawnJobGivesItsSeqBack)
{
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:0:t", "RUNNING", 1000, 0);
    slurm[11] = job(11, 1001, "baton:1:1:t", "CANCELLED", 1050, 1050);
    slurm[12] = job(12, 1001, "baton:1:1:t.1700000000000", "PENDING", 0, 0);
    const std::vector<DbJob> rows { { 1, 0, 10 }, { 1, 1, 11 }, { 1, 1, 12 } };
    EXPECT_TRUE(checkDuplicateSeq(chains, rows, slurm).empty());
    slurm[11] = job(11, 1001, "baton:1:1:t", "CANCELLED", 1050, 1060); // it ran for 10 s
    EXPECT_EQ(checkDuplicateSeq(chains, rows, slurm).size(), 2u);
}

TEST(ChaosInvariants, AJobsOutputSaysWhatItRestored)
{
    const JobOutput output = parseJobOutput("seq 3\nrestored iteration 41 verified\nrestored from the node-local copy\n"
                                            "training from iteration 42 at 1700000000.5\n"
                                            "final checkpoint iteration 50 committed at 1700000030\n"
                                            "final checkpoint iteration 51 FAILED at 1700000031\nexiting\n");
    EXPECT_TRUE(output.restored);
    EXPECT_EQ(output.restoredIteration, 41u);
    EXPECT_TRUE(output.restoredIntact);
    EXPECT_TRUE(output.restoredNodeLocal);
    EXPECT_EQ(output.finalCheckpoints, std::vector<std::int64_t> { 1700000030 });
    const JobOutput fresh = parseJobOutput("seq 0\nfresh start\nrestored iteration 99999999999999999999999 verified\n");
    EXPECT_FALSE(fresh.restored) << "a number out of range is no restore";
}

TEST(ChaosInvariants, ARestoreOfAnotherUsersBytesIsFlagged)
{
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:1", "RUNNING", 1000, 0);
    std::map<std::int64_t, JobOutput> outputs;
    outputs[10] = parseJobOutput("restored iteration 41 verified\nrestored from the chain directory\n");
    EXPECT_TRUE(checkRestores(outputs, slurm, { 1001 }, 1'000'000).empty());
    outputs[10] = parseJobOutput("restored iteration 41 verified\nrestored from the node-local copy\n");
    EXPECT_TRUE(checkRestores(outputs, slurm, { 2002 }, 1'000'000).empty()) << "its own node-local level";
    auto found = checkRestores(outputs, slurm, { 1001 }, 1'000'000);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].invariant, "foreign_bytes_restored");
    outputs[10] = parseJobOutput("restored iteration 1000005 CORRUPT\nrestored from the chain directory\n");
    found = checkRestores(outputs, slurm, {}, 1'000'000);
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].invariant, "restore_corrupt");
    EXPECT_EQ(found[1].invariant, "foreign_bytes_restored");
}

TEST(ChaosInvariants, AHandoverTermLateBehindAnotherOwnerIsFlagged)
{
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:0", "RUNNING", 1000, 0);
    slurm[11] = job(11, 1001, "baton:1:1", "RUNNING", 1100, 0);
    const std::vector<DbJob> rows { { 1, 0, 10 }, { 1, 1, 11 } };
    std::map<std::int64_t, JobOutput> outputs;
    outputs[10] = parseJobOutput("fresh start\n");
    // Not judged before the bound has passed.
    EXPECT_TRUE(checkHandoverTerms(chains, rows, slurm, outputs, {}, 1110, 25, 30).empty());
    auto found = checkHandoverTerms(chains, rows, slurm, outputs, {}, 1130, 25, 30);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].invariant, "handover_term_late");
    // Told 4 s after its successor started: a latency of 4 s.
    outputs[10] = parseJobOutput("final checkpoint iteration 9 committed at 1104\n");
    std::map<std::int64_t, JudgedHandover> judged;
    EXPECT_TRUE(checkHandoverTerms(chains, rows, slurm, outputs, {}, 1130, 25, 30, &judged).empty());
    ASSERT_EQ(judged.size(), 1u);
    EXPECT_EQ(judged[10].seconds, 4);
    EXPECT_EQ(judged[10].successorStart, 1100);
    // Late while the service was away, or while this owner's own calls were stopped: not judged.
    outputs[10] = parseJobOutput("fresh start\n");
    EXPECT_TRUE(checkHandoverTerms(chains, rows, slurm, outputs, { Disturbance { 1050, 1080, -1, "batond" } }, 1130,
        25, 30).empty());
    EXPECT_TRUE(checkHandoverTerms(chains, rows, slurm, outputs, { Disturbance { 1090, 1120, 1001, "stopped" } },
        1130, 25, 30).empty());
    // Another owner's stopped calls are no excuse.
    EXPECT_EQ(checkHandoverTerms(chains, rows, slurm, outputs, { Disturbance { 1090, 1120, 2002, "stopped" } },
                  1130, 25, 30)
                  .size(),
        1u);
    // A paused chain lets a successor that already runs be: its predecessor is not signalled.
    const std::vector<DbChain> paused { DbChain { 1, 1001, "a", "paused", 1, "", "" } };
    EXPECT_TRUE(checkHandoverTerms(paused, rows, slurm, outputs, {}, 1130, 25, 30).empty());
    // A predecessor that ended by itself within the bound was not late.
    slurm[10].end = 1110;
    EXPECT_TRUE(checkHandoverTerms(chains, rows, slurm, outputs, {}, 1130, 25, 30).empty());
}

TEST(ChaosInvariants, AForeignJobInAChainIsFlagged)
{
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:0", "RUNNING", 1000, 0);
    slurm[11] = job(11, 2002, "baton:1:1", "RUNNING", 1000, 0);
    std::vector<DbJob> rows { { 1, 0, 10 } };
    EXPECT_TRUE(checkForeignJobs(chains, rows, slurm).empty());
    rows.push_back({ 1, 1, 11 });
    const auto found = checkForeignJobs(chains, rows, slurm);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].invariant, "foreign_job_adopted");
}

TEST(ChaosInvariants, ACancelledChainsJobsMustEnd)
{
    std::vector<DbChain> cancelled { DbChain { 1, 1001, "a", "cancelled", 1, "cancelled by a", "" } };
    std::map<std::int64_t, SlurmJob> slurm;
    slurm[10] = job(10, 1001, "baton:1:0", "CANCELLED", 1000, 1010);
    slurm[11] = job(11, 1001, "baton:1:1", "PENDING", 0, 0);
    const std::vector<DbJob> rows { { 1, 0, 10 } };
    const std::map<std::int64_t, std::int64_t> since { { 1, 1005 } };
    EXPECT_TRUE(checkCancelledChainsQuiet(cancelled, rows, slurm, since, 1020, 30).empty()); // within the bound
    const auto found = checkCancelledChainsQuiet(cancelled, rows, slurm, since, 1100, 30);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_NE(found[0].subject.find("job 11"), std::string::npos);
}

TEST(ChaosInvariants, AStalledLiveChainIsFlaggedButNotDuringAnOutage)
{
    ProgressTracker tracker;
    DbChain chain { 1, 1001, "a", "running", 0, "", "" };
    const std::vector<Outage> none;
    EXPECT_FALSE(tracker.observe(chain, { 10, 0 }, 0, 100, none, 10));
    EXPECT_FALSE(tracker.observe(chain, { 20, 0 }, 50, 100, none, 10));
    EXPECT_FALSE(tracker.observe(chain, { 20, 0 }, 140, 100, none, 10));
    const auto stalled = tracker.observe(chain, { 20, 0 }, 160, 100, none, 10);
    ASSERT_TRUE(stalled);
    EXPECT_EQ(stalled->invariant, "no_progress");
    EXPECT_FALSE(tracker.observe(chain, { 20, 0 }, 170, 100, none, 10)); // reported once per stall

    // The same stall with a 40 s database outage in it: allowed 100 + 40 + 10.
    ProgressTracker withOutage;
    const std::vector<Outage> outage { Outage { 60, 100, "postgres" } };
    EXPECT_FALSE(withOutage.observe(chain, { 20, 0 }, 50, 100, outage, 10));
    EXPECT_FALSE(withOutage.observe(chain, { 20, 0 }, 190, 100, outage, 10));
    EXPECT_TRUE(withOutage.observe(chain, { 20, 0 }, 210, 100, outage, 10));

    // A paused chain is not expected to progress; its clock starts again when it is resumed.
    ProgressTracker paused;
    DbChain p = chain;
    p.state = "paused";
    EXPECT_FALSE(paused.observe(p, { 20, 0 }, 0, 100, none, 10));
    EXPECT_FALSE(paused.observe(p, { 20, 0 }, 500, 100, none, 10));
    EXPECT_FALSE(paused.observe(chain, { 20, 0 }, 510, 100, none, 10));
    EXPECT_FALSE(paused.observe(chain, { 20, 0 }, 600, 100, none, 10));
    EXPECT_TRUE(paused.observe(chain, { 20, 0 }, 620, 100, none, 10));
    // A new seq is progress.
    ProgressTracker seq;
    EXPECT_FALSE(seq.observe(chain, { 20, 0 }, 0, 100, none, 10));
    EXPECT_FALSE(seq.observe(chain, { 20, 1 }, 90, 100, none, 10));
    EXPECT_FALSE(seq.observe(chain, { 20, 1 }, 180, 100, none, 10));
}

TEST(ChaosInvariants, TickFailuresOutsideOutagesAreFlagged)
{
    EXPECT_TRUE(isTickFailureLine("<3>error: database: ERROR: timestamp out of range; retrying in 500 ms"));
    EXPECT_TRUE(isTickFailureLine("<3>error: slurm: squeue timed out; retrying in 500 ms"));
    EXPECT_FALSE(isTickFailureLine("<3>error: chain alice/a: sbatch failed: x"));
    EXPECT_FALSE(isTickFailureLine("<6>chain alice/a finished"));
    const std::vector<Outage> outages { Outage { 100, 110, "postgres" } };
    const std::vector<TickFailure> failures {
        { 105, "first", "<3>error: database: server closed the connection" },
        { 125, "first", "<3>error: database: reconnecting" },
        { 200, "second", "<3>error: database: value out of range" },
        // A lost connection may fail a tick at any time (a standby's session that died with a restart).
        { 300, "second", "<3>error: database: lost the database connection: FATAL:  terminating connection" },
    };
    auto found = checkTickFailures(failures, outages, 20);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].invariant, "tick_failed");
    EXPECT_EQ(found[0].atSeconds, 200);
    // The same failure with another backoff is the same finding.
    const std::vector<TickFailure> repeated {
        { 200, "first", "<3>error: database: value out of range; retrying in 500 ms" },
        { 201, "first", "<3>error: database: value out of range; retrying in 1000 ms" },
    };
    found = checkTickFailures(repeated, outages, 20);
    ASSERT_EQ(found.size(), 2u);
    EXPECT_EQ(found[0].subject, found[1].subject);
}

TEST(ChaosInvariants, ARefusedCreationLeavesNoChain)
{
    const std::vector<RefusedCreation> refused { { 1001, "bad", 10, "submit with --wait" } };
    std::vector<DbChain> rows { DbChain { 1, 1001, "a", "running", 0, "", "" } };
    EXPECT_TRUE(checkRefusedCreations(rows, refused).empty());
    rows.push_back(DbChain { 2, 1001, "bad", "running", 0, "", "" });
    const auto found = checkRefusedCreations(rows, refused);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].invariant, "refused_input_changed_state");
    rows.back().ownerUid = 2002; // another user's chain of that name
    EXPECT_TRUE(checkRefusedCreations(rows, refused).empty());
}

TEST(ChaosInvariants, RefusalsNeedAStatusAndAMessage)
{
    const std::vector<Outage> outages { Outage { 100, 110, "slurmctld" } };
    std::vector<Reply> replies {
        { 10, "pause (http)", false, 200, "{\"chain\":{}}", false },
        { 11, "pause again (http)", false, 409, "{\"error\":\"cannot pause chain a while it is paused\"}", false },
        { 12, "resume (cli)", true, 5, "batonctl: cannot resume", false },
        { 105, "submit during outage (http)", false, 0, "Read timeout", false },
        { 106, "resume during outage (cli)", true, 1, "batonctl: server unreachable", false },
        { 20, "submit --wait (http)", false, 400, "{\"error\":\"--wait is not allowed\"}", true },
    };
    EXPECT_TRUE(checkReplies(replies, outages, 5).empty());
    replies.push_back({ 30, "submit --wait (http)", false, 201, "{\"chain\":{}}", true });
    replies.push_back({ 31, "pause (http)", false, 0, "Read timeout", false });
    replies.push_back({ 32, "pause (http)", false, 500, "{\"error\":\"boom\"}", false });
    replies.push_back({ 33, "pause (http)", false, 409, "", false });
    replies.push_back({ 34, "cancel (cli)", true, 1, "", false });
    replies.push_back({ 35, "submit --uid=0 (http)", false, 502, "{\"error\":\"sbatch refused the job\"}", true });
    EXPECT_EQ(checkReplies(replies, outages, 5).size(), 6u);
}

TEST(ChaosInvariants, AnUnrequestedPauseIsFlagged)
{
    DbChain chain { 1, 1001, "a", "paused", 2, "job 12 was cancelled outside baton", "" };
    EXPECT_FALSE(checkUnrequestedPause(chain, true, false, 0));
    EXPECT_TRUE(checkUnrequestedPause(chain, false, false, 0));
    EXPECT_FALSE(checkUnrequestedPause(chain, false, true, 0)); // quarantined with a reason
    chain.state = "running";
    EXPECT_FALSE(checkUnrequestedPause(chain, false, false, 0));
}

} // namespace
