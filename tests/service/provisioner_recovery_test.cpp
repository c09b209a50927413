// The chain state machine under faults and users' actions: poison events, clashing rows, restarts,
// pause and resume, cancelled and foreign jobs, failed signals and sbatch timeouts, quarantine, stale
// views and replayed credentials.
#include "provisioner_fixture.hpp"

#include "common/munge_credential.hpp"

namespace {

using namespace baton::service;
using namespace baton::service::fixture;

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
    const LivePolicies live = makeLivePolicies(config_, connection_);
    ASSERT_NE(live.predictor, nullptr);
    const auto* perSize = dynamic_cast<const baton::sim::ShapeRulesPolicy*>(live.policies.configured.get());
    ASSERT_NE(perSize, nullptr);
    EXPECT_EQ(
        baton::sim::describeRules(perSize->rules()), "1 node: window tau=0.65; 8 nodes: quantile q=0.25");
    EXPECT_EQ(live.policies.configured->name(), "predict");
    // Every policy is there for the chains that name their own; the service's for those that do not.
    EXPECT_EQ(live.policies.forChain("reactive").name(), "reactive");
    EXPECT_EQ(live.policies.forChain("avg").name(), "avg");
    EXPECT_EQ(live.policies.forChain("checkpoint-aware").name(), "checkpoint-aware");
    EXPECT_EQ(live.policies.forChain(std::nullopt).name(), "predict");

    // A newer version whose rules are damaged: its quantile.
    baton::sim::storeModel(connection_, predictor, "waits", std::nullopt,
        Json { { "evaluation",
            { { "predict",
                { { "q", 0.3 },
                    { "rules", Json::array({ { { "nodes", 1 }, { "rule", "guess" } } }) } } } } } });
    const LivePolicies fallback = makeLivePolicies(config_, connection_);
    const auto* quantile = dynamic_cast<const baton::sim::QuantilePolicy*>(fallback.policies.configured.get());
    ASSERT_NE(quantile, nullptr);
    EXPECT_DOUBLE_EQ(quantile->q(), 0.3);

    // checkpoint-aware: its quantile and the persistence chosen with it.
    baton::sim::storeModel(connection_, predictor, "waits", std::nullopt,
        Json { { "evaluation", { { "checkpoint-aware", { { "q", 0.2 }, { "persist", 3 } } } } } });
    config_.policy = "checkpoint-aware";
    const LivePolicies checkpoint = makeLivePolicies(config_, connection_);
    const auto* persistent = dynamic_cast<const baton::sim::CheckpointAwarePolicy*>(checkpoint.policies.configured.get());
    ASSERT_NE(persistent, nullptr);
    EXPECT_DOUBLE_EQ(persistent->q(), 0.2);
    EXPECT_EQ(persistent->persist(), 3);
    EXPECT_EQ(persistent->submitLead(), config_.submitLead.count());

    // Rules per size stored for checkpoint-aware (no comparison writes them): it takes its quantile, and
    // stays checkpoint-aware rather than a per-size quantile rule without avg's.
    baton::sim::storeModel(connection_, predictor, "waits", std::nullopt,
        Json { { "evaluation", { { "checkpoint-aware", { { "q", 0.4 }, { "rules", rules } } } } } });
    const LivePolicies perSizeStored = makeLivePolicies(config_, connection_);
    const auto* stillCheckpointAware
        = dynamic_cast<const baton::sim::CheckpointAwarePolicy*>(perSizeStored.policies.configured.get());
    ASSERT_NE(stillCheckpointAware, nullptr);
    EXPECT_DOUBLE_EQ(stillCheckpointAware->q(), 0.4);

    // Without a model of that name the learned policies decide as avg.
    config_.modelName = "none-such";
    const LivePolicies without = makeLivePolicies(config_, connection_);
    EXPECT_EQ(without.predictor, nullptr);
    EXPECT_EQ(without.policies.forChain("predict").name(), "avg");
    EXPECT_EQ(without.policies.forChain("reactive").name(), "reactive");
}

// One job's flood of step reports (a user's thousands of srun steps) is read fairly with every other
// job's: another job's report is among the next batch, and each job's reports keep their order.
TEST_F(ProvisionerTest, OneJobsFloodOfEventsDelaysNoOtherJobsReport)
{
    for (int i = 0; i < 1500; ++i)
        ASSERT_TRUE(tables_.events.insert("flood-" + std::to_string(i), "step_start", "flooding", 41,
            Json { { "step", std::to_string(i) } }, 0));
    ASSERT_TRUE(tables_.events.insert("other-1", "task_exit", "other", 42, Json { { "step", "batch" } }, 0));
    ASSERT_TRUE(tables_.events.insert("other-2", "task_exit", "other", 42, Json { { "step", "0" } }, 0));
    const auto batch = tables_.events.unprocessed(1000);
    ASSERT_EQ(batch.size(), 1000u);
    std::vector<std::string> otherSteps;
    std::int64_t lastFlood = -1;
    for (const auto& event : batch) {
        if (event.slurmJobId == 42)
            otherSteps.push_back(event.payload.value("step", ""));
        if (event.slurmJobId == 41) {
            EXPECT_GT(event.id, lastFlood) << "a job's events in the order they came";
            lastFlood = event.id;
        }
    }
    EXPECT_EQ(otherSteps, (std::vector<std::string> { "batch", "0" })) << "the other job's reports, in order";
}

// A finished chain that its owner starts again trains again: the done checkpoint of its earlier run no
// longer ends it after one job, and it runs with the spec it was started again with.
TEST_F(ProvisionerTest, AFinishedChainStartedAgainTrainsAgain)
{
    const ChainRow chain = chainWithRunningJob(51);
    tables_.checkpoints.record(chain.id, 51,
        Json { { "name", "ckpt-000000000010" }, { "iteration", 10 }, { "created_unix", 1000 }, { "total_bytes", 1 },
            { "training_done", true } },
        "/chains/x");
    ASSERT_TRUE(tables_.checkpoints.trainingDone(chain.id));
    ASSERT_TRUE(forceState(chain.id, ChainState::Running, ChainState::Finished));
    const auto seq = tables_.chains.restart(*tables_.chains.find(chain.id), ChainEvent::Resubmit, "started again",
        Json { { "script", "#!/bin/bash\ntrain --epochs 20\n" } });
    ASSERT_TRUE(seq);
    EXPECT_EQ(stateOf(chain), ChainState::Running);
    EXPECT_FALSE(tables_.checkpoints.trainingDone(chain.id));
    EXPECT_EQ(tables_.chains.spec(chain.id)["script"], "#!/bin/bash\ntrain --epochs 20\n");
}

// A checkpoint report whose values no column can hold (a user's manifest said so) is set aside with its
// reason; it neither fails the tick nor stops any other chain.
TEST_F(ProvisionerTest, PoisonEventIsSetAsideAndEveryOtherChainIsStepped)
{
    const ChainRow poisoned = chainWithRunningJob(31, "-a");
    const ChainRow other = chainWithRunningJob(32, "-b");
    const auto report = [&](const std::string& key, const Json& checkpoint) {
        ASSERT_TRUE(tables_.events.insert(key, "task_exit", poisoned.name, 31,
            Json { { "chain_dir", "/chains/x" }, { "checkpoint", checkpoint } }, 0));
    };
    report("huge-time", Json { { "name", "ckpt-000000000010" }, { "iteration", 10 }, { "created_unix", 1e300 } });
    report("huge-iteration",
        Json { { "name", "ckpt-000000000010" }, { "iteration", 9223372036854775807LL }, { "created_unix", 1 } });
    report("bad-name", Json { { "name", "../../etc" }, { "iteration", 10 }, { "created_unix", 1 } });
    EXPECT_NO_THROW(tick(std::make_shared<AlwaysSubmit>()));
    EXPECT_EQ(stateOf(other), ChainState::SuccessorPending) << "the other chain was stepped";
    EXPECT_EQ(metrics_.chainErrors("event").Value(), 3);
    EXPECT_TRUE(tables_.events.unprocessed(10).empty()) << "set aside, never tried again";
    const auto errors = connection_.exec(baton::db::Statement { "test_event_errors",
        "SELECT count(*) FROM events WHERE error LIKE '%out of range%'" });
    EXPECT_EQ(errors.int64(0, 0), 3);
    EXPECT_FALSE(tables_.checkpoints.latest(poisoned.id).has_value());
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
    const auto rejected = tables_.jobs.upsert(batch);
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_EQ(rejected[0].slurmJobId, 35);
    EXPECT_EQ(rejected[0].chainId, a.id);
    EXPECT_EQ(tables_.jobs.bySlurmId(34)->job.state, "COMPLETED");
    EXPECT_FALSE(tables_.jobs.bySlurmId(35).has_value());
}

// A chain that runs again continues after every seq it ever used: its next job never clashes with the
// rows of a successor that was cancelled or a job adopted before.
TEST_F(ProvisionerTest, ARestartedChainContinuesAfterEverySeqItUsed)
{
    const ChainRow chain = chainWithRunningJob(36);
    tick(std::make_shared<AlwaysSubmit>()); // successor: seq 1
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    ASSERT_TRUE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::Cancel, "test"));
    const auto seq = tables_.chains.restart(*tables_.chains.find(chain.id), ChainEvent::Resubmit, "test");
    ASSERT_EQ(seq, 2);
    const ChainRow restarted = *tables_.chains.find(chain.id);
    EXPECT_EQ(restarted.state, ChainState::Running);
    EXPECT_EQ(restarted.seq, 2);
    ASSERT_TRUE(tables_.submissions.recordIntent(chain.id, 2, Submitter::submissionKey(restarted, 2), "restart"));
    EXPECT_NO_THROW(tick()); // the intent of a resubmission is submitted at once
    ASSERT_EQ(cluster_.submissions.size(), 2u);
    EXPECT_EQ(tables_.submissions.find(chain.id, 2)->state, "submitted");
    // A second restart of a chain read before the first is fenced out.
    EXPECT_FALSE(tables_.chains.restart(*tables_.chains.find(chain.id), ChainEvent::Resubmit, "test"))
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
    EXPECT_EQ(tables_.submissions.find(chain.id, 1)->state, "cancelled");
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
    EXPECT_EQ(tables_.jobs.bySlurmId(cluster_.jobs.back().id)->job.seq, 1);
    EXPECT_TRUE(tables_.jobs.bySlurmId(queued)->job.withdrawn);
}

// Pause withdraws the queued successor; resume does not take that cancelled job for a started one, nor
// pause the chain again.
TEST_F(ProvisionerTest, PauseThenResumeGoesOnWithoutAHandoverOrASecondPause)
{
    const ChainRow chain = chainWithRunningJob(38);
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_TRUE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::Pause, "test"));
    cluster_.now += 10;
    tick(std::make_shared<AlwaysSubmit>());
    ASSERT_EQ(cluster_.cancelled.size(), 1u);
    ASSERT_TRUE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::Resume, "test"));
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
    ASSERT_NO_FATAL_FAILURE(resumeAfterHandCancel(chain, 39));
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
    ASSERT_NO_FATAL_FAILURE(resumeAfterHandCancel(chain, 46));
    tick();
    ASSERT_EQ(stateOf(chain), ChainState::SuccessorPending);
    ASSERT_EQ(cluster_.submissions.size(), 1u);
    cluster_.now += 10;
    cluster_.cancel(cluster_.jobs.back().id, 65534); // the owner's scancel of the queued job
    for (int i = 0; i < 3; ++i) {
        cluster_.now += 10;
        tick();
        EXPECT_NE(stateOf(chain), ChainState::Paused) << tables_.chains.find(chain.id)->reason.value_or("");
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
    const ChainRow pending = *tables_.chains.find(chain.id);
    const std::string key = Submitter::submissionKey(pending, 1);
    ASSERT_TRUE(tables_.submissions.recordIntent(chain.id, 1, key, "policy"));
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
    EXPECT_NE(tables_.submissions.find(chain.id, 1)->slurmJobId, 41);
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
    EXPECT_FALSE(tables_.handovers.signal(chain.id, 0).sentAt);
    cluster_.now += 10;
    tick(); // fails again
    EXPECT_TRUE(cluster_.signals.empty());
    cluster_.now += 10;
    tick();
    ASSERT_EQ(cluster_.signals.size(), 1u);
    EXPECT_EQ(cluster_.signals[0].jobId, 42);
    EXPECT_EQ(tables_.handovers.signal(chain.id, 0).sentAt, cluster_.now);
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
    EXPECT_EQ(tables_.submissions.find(chain.id, 1)->state, "failed");
    for (int i = 0; i < 3; ++i) {
        cluster_.now += 10;
        tick(std::make_shared<AlwaysSubmit>());
    }
    EXPECT_EQ(cluster_.submissions.size(), 1u) << "a second job for one key";
    EXPECT_EQ(tables_.submissions.find(chain.id, 1)->state, "submitted");
    EXPECT_EQ(tables_.submissions.find(chain.id, 1)->slurmJobId, cluster_.jobs.back().id);
    EXPECT_EQ(stateOf(chain), ChainState::SuccessorPending);
}

// Cancelling a chain is carried out by the tick: its current job and a successor submitted in the tick
// before are both cancelled, and again while slurmctld still shows them.
TEST_F(ProvisionerTest, CancelWithdrawsTheCurrentJobAndAJustSubmittedSuccessor)
{
    const ChainRow chain = chainWithRunningJob(44);
    tick(std::make_shared<AlwaysSubmit>());
    const std::int64_t successor = cluster_.jobs.back().id;
    ASSERT_TRUE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::Cancel, "test"));
    tables_.chains.setWithdrawJobs(chain.id, true);
    cluster_.uncancellable = { 44 }; // the first scancel of the running job fails
    cluster_.now += 10;
    EXPECT_NO_THROW(tick());
    EXPECT_EQ(cluster_.cancelled, std::vector<std::int64_t> { successor });
    cluster_.uncancellable.clear();
    cluster_.now += 10;
    tick();
    EXPECT_EQ(cluster_.cancelled, (std::vector<std::int64_t> { successor, 44 }));
    EXPECT_EQ(tables_.chains.toWithdraw().size(), 1u) << "until squeue shows them ended";
    cluster_.now += 10;
    tick();
    EXPECT_TRUE(tables_.chains.toWithdraw().empty());
    EXPECT_EQ(cluster_.cancelled.size(), 2u);
}

// A chain whose Slurm actions keep failing is quarantined with its reason after a few ticks; the other
// chains go on, and its owner's resume takes it back.
TEST_F(ProvisionerTest, AChainWhoseActionsKeepFailingIsQuarantinedAlone)
{
    const ChainRow stuck = chainWithRunningJob(45, "-a");
    const ChainRow other = chainWithRunningJob(46, "-b");
    ASSERT_TRUE(forceState(stuck.id, ChainState::Running, ChainState::Handover));
    tables_.handovers.start(stuck.id, 0, 45, 47, cluster_.now - 100000); // long past the handover timeout
    tables_.handovers.recordSignal(stuck.id, 0, cluster_.now - 100000);
    cluster_.uncancellable = { 45 };
    Provisioner provisioner(config_, tables_, cluster_, metrics_, ChainPolicies(std::make_shared<AlwaysSubmit>()), timeOnlyDecisionPoints);
    for (int i = 0; i < Provisioner::quarantineAfterFailures; ++i) {
        EXPECT_NE(stateOf(stuck), ChainState::Quarantined) << "after " << i << " failures";
        cluster_.now += 10;
        EXPECT_NO_THROW(provisioner.tick());
    }
    EXPECT_EQ(stateOf(stuck), ChainState::Quarantined);
    EXPECT_NE(tables_.chains.find(stuck.id)->reason->find("Access/permission denied"), std::string::npos);
    EXPECT_EQ(metrics_.chainErrors("slurm").Value(), Provisioner::quarantineAfterFailures);
    EXPECT_EQ(stateOf(other), ChainState::SuccessorPending);
    EXPECT_EQ(metrics_.chains(ChainState::Quarantined).Value(), 1);
    const auto cancels = cluster_.cancelled.size();
    provisioner.tick();
    EXPECT_EQ(cluster_.cancelled.size(), cancels) << "nothing is done for a quarantined chain";
    EXPECT_TRUE(tables_.chains.transition(*tables_.chains.find(stuck.id), ChainEvent::Resume, "test"));
}

// Every write is fenced on the state and seq its writer read: a tick's stale view cannot overwrite a
// pause or cancel that came in between, nor advance a chain that moved on.
TEST_F(ProvisionerTest, WritesFromAStaleViewChangeNothing)
{
    const ChainRow chain = chainWithRunningJob(48);
    ASSERT_TRUE(forceState(chain.id, ChainState::Running, ChainState::SuccessorPending));
    const ChainRow stale = *tables_.chains.find(chain.id);
    ASSERT_TRUE(tables_.chains.transition(stale, ChainEvent::Pause, "by the owner"));
    EXPECT_FALSE(tables_.chains.advance(stale, ChainEvent::PredecessorEnded));
    EXPECT_FALSE(tables_.chains.transition(stale, ChainEvent::SuccessorStarted));
    EXPECT_EQ(stateOf(chain), ChainState::Paused);
    EXPECT_EQ(tables_.chains.find(chain.id)->seq, 0);
    EXPECT_FALSE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::SuccessorStarted))
        << "the table does not allow it from paused";
}

// Two instances ask two munged daemons, each of which refuses only a credential it saw itself: the
// record in the database refuses the second use wherever it comes.
TEST_F(ProvisionerTest, ACredentialIsAcceptedOnceAcrossInstances)
{
    baton::db::Connection otherInstance(conninfo_);
    Tables other(otherInstance);
    EXPECT_TRUE(CredentialStore(connection_).firstUse("MUNGE:AwQDAAA-one"));
    EXPECT_FALSE(other.credentials.firstUse("MUNGE:AwQDAAA-one"));
    EXPECT_TRUE(other.credentials.firstUse("MUNGE:AwQDAAA-two"));

    // munged reads a credential with blanks or line breaks inserted, text after its last ':', or other
    // unused low bits in its last base64 character as the same credential: so does the record.
    using baton::munge::credentialBytes;
    EXPECT_TRUE(CredentialStore(connection_).firstUse(credentialBytes("MUNGE:AwQDAAB4bWVhbmluZ2Z1bA==:")));
    for (const char* respelled : { "MUNGE:AwQD AAB4bWVh\nbmluZ2Z1bA==:", "MUNGE:AwQDAAB4bWVhbmluZ2Z1bA==:x:",
             "MUNGE:AwQDAAB4bWVhbmluZ2Z1bA==:  trailing", "MUNGE:AwQDAAB4bWVhbmluZ2Z1bB==:" })
        EXPECT_FALSE(other.credentials.firstUse(credentialBytes(respelled))) << respelled;
    EXPECT_TRUE(other.credentials.firstUse(credentialBytes("MUNGE:AwQDAAB4bWVhbmluZ2Z1bQ==:"))) << "another byte";
}

} // namespace
