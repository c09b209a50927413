// The chaos test's fixture (chaos_test.cpp): a private PostgreSQL and Slurm, two batond instances,
// several users' chains, the requests that act on them, the observer that checks the invariants
// (chaos_observe.cpp) and the faults it injects (chaos_faults.cpp).
#pragma once

#include "chaos_model.hpp"
#include "tests/support/batond_client.hpp"
#include "tests/support/services.hpp"

#include "common/baton_contract.hpp"
#include "common/munge_credential.hpp"
#include "db/connection.hpp"
#include "db/migrations.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <atomic>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <netinet/in.h>
#include <pwd.h>
#include <regex>
#include <set>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace baton::chaos::fixture {

using baton::test::credentialAs;
using baton::test::freePort;
using baton::test::HttpReply;
using baton::test::PostgresServer;
using baton::test::run;
using baton::test::send;
using baton::test::SlurmCluster;
using baton::test::TempDir;
using Json = nlohmann::json;
namespace fs = std::filesystem;
namespace chaos = baton::chaos;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline constexpr int minimumChains = 12;
inline constexpr int userCount = 3;
inline constexpr std::int64_t handoverTimeoutSeconds = 60;
// A handover: the predecessor is signalled when its successor starts, and cancelled after the
// handover timeout; Slurm's KillWait and a few ticks on top.
inline constexpr std::int64_t handoverBoundSeconds = handoverTimeoutSeconds + 30;
inline constexpr std::int64_t cancelBoundSeconds = 45;
inline constexpr double outageGraceSeconds = 30;
inline constexpr std::int64_t plainRegisterBoundSeconds = 60;
// Manifests the test plants are named above every real iteration the run reaches.
inline constexpr std::uint64_t plantedIterationFloor = 999'999'999'000ULL;
// The checkpoints the attacker plants in node-local directories he prepared for others: valid ones,
// written with the library, at iterations no real chain reaches (and below the hostile manifests').
inline constexpr std::uint64_t foreignIterationFloor = 900'000'000'000ULL;
// batond's Slurm timeout (--slurm-timeout-seconds) and the bound on a handover's TERM: one call's
// timeout that another owner's stopped call may cost, on top of what a handover takes here (a tick to
// see the successor run, the signal, the final checkpoint) with room for a loaded machine.
inline constexpr std::int64_t slurmTimeoutSeconds = 10;
inline constexpr std::int64_t handoverTermBoundSeconds = slurmTimeoutSeconds + 15;
// Calls of one owner the stopped-child faults stop in a whole run: below the three timeouts in a row
// that quarantine a chain.
inline constexpr int maxStoppedCallsPerOwner = 2;

// A batond process that can say whether it is the active instance.
class Batond : public baton::test::BatondProcess {
public:
    using BatondProcess::BatondProcess;
    bool leading() const
    {
        if (!running())
            return false;
        const HttpReply metrics = send(port(), "GET", "/metrics", "", std::nullopt, 5);
        return metrics.status == 200 && metrics.body.find("\nbaton_leader 1") != std::string::npos;
    }
};

struct User {
    std::string name;
    uid_t uid = 0;
};

inline std::int64_t number(const std::string& text)
{
    if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
        return 0;
    return std::stoll(text);
}

struct ChainSpec {
    std::string name;
    int user = 0;
    int iterations = 0;
    // Jobs that wait this long in the queue after their submission (sbatch --begin), as on a busy
    // cluster: their successors are queued for a while, so that they can be cancelled or withdrawn there.
    int queuedSeconds = 0;
};

class ChaosTest : public testing::Test {
protected:
    // The test command's schedule: one of the few 270-s schedules with 19 of the 20 kinds, each newer
    // fault among them, and one owner's calls stopped where no outage covers them.
    static constexpr std::uint64_t defaultSeed = 250464;
    void SetUp() override;
    void TearDown() override;

    // Twelve chains and their handovers need more CPUs than a CI machine has: the node is declared
    // with 64 CPUs (slurmd takes the configuration's word), and ended jobs stay in squeue for a day so
    // that every check reads slurmctld's own record of them.
    void widenCluster();
    std::vector<std::string> batondArgs(int port, const std::string& name) const;
    double now() const;
    static std::int64_t epochNow();

    // ------------------------------------------------------------------------------------------------
    // Requests, recorded with their answers

    // An instance that answers (one just restarted may not listen yet): requests are the test's, not a
    // test of a client against a server that is starting.
    int apiPort() const;
    HttpReply http(uid_t uid, const std::string& method, const std::string& target, const std::string& body,
        const std::string& what, bool mustRefuse = false);

    // batonctl as `user` (root: the operator).
    baton::test::ProcessResult ctl(const std::string& user, std::vector<std::string> args, const std::string& what);
    void record(chaos::Reply reply);
    void note(const std::string& text);
    std::string jobScript(int iterations) const;
    Json chainRequest(const ChainSpec& spec, const std::vector<std::string>& extraArgs = {}) const;

    // ------------------------------------------------------------------------------------------------
    // Observation and checks

    struct Snapshot {
        bool dbOk = false;
        std::vector<chaos::DbChain> chains;
        std::vector<chaos::DbJob> jobs;
        std::map<std::int64_t, std::int64_t> dbIteration; // newest recorded checkpoint per chain
    };
    bool readSlurm();
    bool startedBeforeItsEnd(std::int64_t jobId);
    Snapshot readDatabase() const;
    fs::path chainDir(const std::string& user, const std::string& name) const;
    std::string userNameOf(std::int64_t uid) const;
    fs::path localRoot() const { return base_->path() / "local"; }
    // The jobs' outputs (work/job-ID.out), read again while their jobs may still write.
    void readJobOutputs(const std::map<std::int64_t, chaos::SlurmJob>& slurm);
    void checkJobs(const Snapshot& snapshot, const std::map<std::int64_t, chaos::SlurmJob>& slurm,
        std::vector<chaos::Violation>& found);
    void addDisturbance(double seconds, std::int64_t uid, const std::string& what); // from now, epoch-based

    // The newest real checkpoint in a chain directory (the test's planted ones excluded).
    std::int64_t diskIteration(const fs::path& dir) const;
    void readLogs();

    // batond's tick failure counter, where the build has one (today's has none: its loop's log lines are
    // read instead). baton_db_errors_total is not one: it also counts lost connections and the API's.
    void readMetrics();
    void addViolations(const std::vector<chaos::Violation>& found, double at);
    void count(const std::string& invariant, std::size_t evaluations = 1);

    std::map<std::int64_t, std::int64_t> cancelledSince(
        const Snapshot& snapshot, const std::vector<chaos::Outage>& outages, double at, std::int64_t epoch);
    void checkPlainChains(const Snapshot& snapshot, const std::map<std::int64_t, chaos::SlurmJob>& slurm,
        std::int64_t epoch, std::vector<chaos::Violation>& found);
    void checkAgainstSlurm(const Snapshot& snapshot, const std::map<std::int64_t, chaos::SlurmJob>& slurm,
        const std::vector<chaos::Outage>& outages, double at, std::vector<chaos::Violation>& found);
    void checkChains(const Snapshot& snapshot, const std::vector<chaos::Outage>& outages, double at,
        std::vector<chaos::Violation>& found);

    // One round: read the facts, check every invariant on them.
    void observeAndCheck();
    void startObserver();
    void stopObserverThread();

    // ------------------------------------------------------------------------------------------------
    // Faults

    std::optional<chaos::DbChain> chainRow(const ChainSpec& spec) const;

    // The chain's own jobs in the given Slurm state, newest first.
    std::vector<chaos::SlurmJob> chainJobs(const chaos::DbChain& chain, const std::string& state) const;

    // The target chain if it is live, else the next live one in index order (a hostile file in the
    // directory of a chain that has ended is never read): else the target.
    const ChainSpec& liveTarget(int index) const;
    std::string key(const ChainSpec& spec) const;
    void setPauseExpected(const ChainSpec& spec, bool expected);

    // pause / resume / cancel / resubmit of one chain by its owner (HTTP or batonctl) or an operator.
    void act(const ChainSpec& spec, const std::string& action, bool asOperator, bool cli);

    // The action a variant stands for. Half of them are "the next thing a user would do" in the chain's
    // present state (pause a live chain, resume a paused one, resubmit an ended one), so that pauses are
    // followed by resumes and cancels by resubmits; the rest are fixed (and often refused: 409).
    std::string actionOf(int variant, const ChainSpec& spec) const;
    void plantManifest(const ChainSpec& spec, int variant);
    void plantRegistry(const ChainSpec& spec);
    void hostileSbatchArgs(const chaos::Fault& fault);

    // Chain ids are sequential and visible: another user submits jobs carrying the key of the target
    // chain's next seq and of the first job of the next chain to be created, and leaves them queued or
    // running for two minutes, for batond to find when it reconciles an intent by its key.
    void forgedComment(const ChainSpec& spec, int other);
    void plainSbatchChain(const chaos::Fault& fault);

    // Before any job: the attacker (the last user) makes the first user's node-local directory himself,
    // and the second user's a link to a directory of his own, as one job array reaching every node could.
    void prepareOthersLocalDirs();
    // The attacker writes a valid checkpoint (the chain job's region, with the library) above every real
    // iteration into a directory he prepared for a victim's chain: it must never be restored.
    void foreignLocalCheckpoint(const chaos::Fault& fault);
    // batond's next calls for one owner (a child of batond running as that owner) are SIGSTOPped, at most
    // maxStoppedCallsPerOwner in the run; batond kills them at its Slurm timeout. In the background.
    void stopOwnersCalls(const chaos::Fault& fault);
    std::vector<pid_t> batondChildrenOf(uid_t uid) const;
    std::optional<std::int64_t> runningJobOf(const ChainSpec& spec) const; // its newest running job
    // Thousands of large checkpoint hints in one chain's spool, written as its owner.
    void spoolFlood(const chaos::Fault& fault);
    // Thousands of plugin events for one running job, posted as the plugin (root) does: a user's many
    // srun steps.
    void eventFlood(const chaos::Fault& fault);
    Batond* leader();
    void beginOutage(const std::string& what);
    void endOutage();
    pid_t slurmctldPid() const;
    void userScancel(const chaos::Fault& fault);
    void racingActions(const chaos::Fault& fault, const ChainSpec& spec);
    void resubmitEndedName(const ChainSpec& spec);
    void sleepThrough(const chaos::Fault& fault); // the fault's duration
    void killBatond(const chaos::Fault& fault);
    void restartPostgres(const chaos::Fault& fault);
    void stopSlurmctld(const chaos::Fault& fault);
    void freezeSlurmctld(const chaos::Fault& fault);
    void inject(const chaos::Fault& fault);

    // ------------------------------------------------------------------------------------------------
    // The run

    void startBatonds(); // two instances, both ready
    void submitChains(); // options_.chains chains, by users in turn
    // Each fault at its time, an observation round after each; the count injected by kind.
    std::map<std::string, int> injectAll(const std::vector<chaos::Fault>& schedule);
    std::string summary(const std::map<std::string, int>& scheduled, std::map<std::string, int>& injected);
    std::uint64_t seed_ = 0;
    chaos::ScheduleOptions options_;
    double progressBound_ = 180;
    std::unique_ptr<TempDir> base_;
    std::unique_ptr<PostgresServer> pg_;
    std::string conninfo_;
    std::unique_ptr<SlurmCluster> slurm_;
    std::string plugstack_;
    int ports_[2] = { 0, 0 };
    std::vector<User> users_;
    std::vector<ChainSpec> specs_;
    std::vector<std::unique_ptr<Batond>> batonds_;
    std::vector<std::size_t> logOffsets_;
    Clock::time_point start_ = Clock::now();
    mutable std::mutex mutex_; // guards everything below that two threads touch
    std::mutex logMutex_;
    std::mutex observeMutex_;
    std::map<std::int64_t, chaos::SlurmJob> slurmJobs_;
    std::vector<chaos::DbChain> lastChains_;
    std::vector<chaos::DbJob> lastJobs_;
    std::vector<chaos::Outage> outages_;
    std::vector<chaos::TickFailure> tickFailures_;
    std::vector<chaos::Reply> replies_;
    std::vector<chaos::Violation> violations_;
    std::set<std::string> seenViolations_;
    std::map<std::string, std::size_t> checks_;
    std::map<std::string, bool> pauseExpected_; // by name@uid
    std::set<std::string> hostileChains_; // by name@uid
    std::map<std::int64_t, std::pair<std::int64_t, std::string>> plainJobs_; // job -> (uid, chain name)
    std::map<std::int64_t, std::int64_t> cancelledSince_;
    std::map<std::string, double> metricValues_; // by instance and series
    std::vector<chaos::RefusedCreation> refusedCreations_;
    std::set<std::int64_t> pausedUnexpectedly_;
    chaos::ProgressTracker progress_;
    std::atomic<bool> stopObserver_ { false };
    std::thread observer_;
    int plantedCount_ = 0;
    int hostileArgsCount_ = 0;
    int plainCount_ = 0;
    std::set<std::int64_t> preparedByAnother_; // uids whose node-local directory the attacker made
    std::vector<chaos::Disturbance> disturbances_; // epoch seconds
    std::map<std::int64_t, chaos::JobOutput> outputs_; // by job id
    std::map<std::int64_t, chaos::JudgedHandover> judgedHandovers_; // by predecessor job id
    std::map<uid_t, int> stoppedCalls_;
    std::vector<std::thread> background_; // faults that last (stopped calls): joined before the summary
    int foreignCount_ = 0;
};

} // namespace baton::chaos::fixture
