// The fixture of the chain state machine's tests (service_provisioner_test): a real PostgreSQL, a
// database per test, a scripted cluster (a fake of Slurm) and policies that always or never submit.
#pragma once

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

#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace baton::service::fixture {

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
        // An owner whose sbatch hangs (a stalled working directory): the tick runs owners' calls at once.
        if (beforeSubmit)
            beforeSubmit(request.owner);
        const std::lock_guard lock(mutex);
        submittedBy.insert(request.owner);
        submitted.notify_all();
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
    void signal(std::int64_t jobId, const std::string& name, SignalScope scope, std::int64_t owner) override
    {
        if (beforeSignal)
            beforeSignal(static_cast<uid_t>(owner));
        const std::lock_guard lock(mutex);
        signalledBy.insert(static_cast<uid_t>(owner));
        submitted.notify_all();
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
    std::string batchScript(std::int64_t, std::int64_t) override
    {
        ++batchScriptReads;
        return script;
    }

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
    std::mutex mutex; // submit runs on the tick's Slurm threads
    std::condition_variable submitted;
    std::set<uid_t> submittedBy;
    std::function<void(uid_t)> beforeSubmit;
    std::set<uid_t> signalledBy;
    std::function<void(uid_t)> beforeSignal;
    std::string script = "#!/bin/bash\ntrain\n"; // every job's batch script, as slurmctld keeps it
    int batchScriptReads = 0;
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
        , tables_(connection_)
    {
        config_.retryBudget = 2;
        config_.submitGrace = std::chrono::seconds(30);
    }

    // The chain's running job `jobId` is cancelled by hand (the chain pauses), then its owner resumes it
    // as the API does for an ended current job; ten seconds pass.
    void resumeAfterHandCancel(const ChainRow& chain, std::int64_t jobId)
    {
        cluster_.end(jobId, "CANCELLED");
        tick();
        ASSERT_EQ(stateOf(chain), ChainState::Paused);
        ASSERT_TRUE(tables_.chains.transition(*tables_.chains.find(chain.id), ChainEvent::Resume, "test"));
        tables_.chains.setResubmitRequested(chain.id, true);
        cluster_.now += 10;
    }

    // A job of `uid` that slurmctld shows running since `startedAgo` seconds, with an hour's limit.
    ClusterJob runningJob(std::int64_t id, std::int64_t uid, std::int64_t startedAgo = 60)
    {
        ClusterJob job;
        job.id = id;
        job.userId = uid;
        job.state = "RUNNING";
        job.submitTime = job.startTime = cluster_.now - startedAgo;
        job.timeLimitSeconds = 3600;
        cluster_.jobs.push_back(job);
        return job;
    }
    // A chain `name` of `uid` whose first job `jobId` runs.
    ChainRow chainOf(std::int64_t uid, const std::string& ownerName, const std::string& name, std::int64_t jobId)
    {
        const ClusterJob first = runningJob(jobId, uid);
        const ChainRow chain = tables_.chains.create(uid, ownerName, name, "/chains/" + name,
            Json { { "script", "#!/bin/bash\ntrain\n" }, { "sbatch_args", Json::array() }, { "workdir", "/tmp" } });
        tables_.jobs.upsert(chain.id, 0, first);
        return chain;
    }
    // A chain named after the test (and `suffix`) whose first job (running) came from plain sbatch.
    ChainRow chainWithRunningJob(std::int64_t jobId, const std::string& suffix = "")
    {
        return chainOf(65534, "nobody", testing::UnitTest::GetInstance()->current_test_info()->name() + suffix, jobId);
    }
    // The same, its chain directory `dir` made the owner's (uid 65534), where batond writes as the owner.
    ChainRow chainInOwnersDirectory(const std::filesystem::path& dir, std::int64_t jobId, const std::string& suffix = "")
    {
        EXPECT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
        const ChainRow chain = chainWithRunningJob(jobId, suffix);
        tables_.chains.setChainDir(chain.id, dir.string());
        return chain;
    }
    // A chain of another owner (uid 1, daemon) named `name`, whose first job `jobId` runs.
    ChainRow chainOfAnotherOwner(std::int64_t jobId, const std::string& name) { return chainOf(1, "daemon", name, jobId); }
    void tick(
        std::shared_ptr<const baton::sim::Policy> policy = std::make_shared<baton::sim::ReactivePolicy>())
    {
        Provisioner provisioner(config_, tables_, cluster_, metrics_, policy, timeOnlyDecisionPoints);
        provisioner.tick();
    }
    ChainState stateOf(const ChainRow& chain) { return tables_.chains.find(chain.id)->state; }
    // Puts a chain in a state for a test's set-up, whether or not the state machine leads there.
    bool forceState(std::int64_t chainId, ChainState from, ChainState to)
    {
        static constexpr baton::db::Statement force { "test_force_state",
            "UPDATE chains SET state = $2 WHERE id = $1 AND state = $3" };
        return connection_.exec(force, baton::db::Params(chainId, nameOf(to), nameOf(from))).affected() == 1;
    }

    static inline baton::test::PostgresServer* server_ = nullptr;
    ServiceConfig config_;
    const std::string conninfo_;
    baton::db::Connection connection_;
    Tables tables_;
    ScriptedCluster cluster_;
    Metrics metrics_;
};

// Never submits: the tests see what a tick writes while a chain only waits.
class NeverSubmit final : public baton::sim::Policy {
public:
    std::string name() const override { return "never"; }
    std::size_t firstSubmit(std::span<const baton::sim::DecisionPoint> points) const override
    {
        return points.size();
    }
};

} // namespace baton::service::fixture
