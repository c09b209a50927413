// batond's pieces that need no services: configuration, the state name table, bounded JSON bodies,
// the spool collector.
#include "service/bounded_json.hpp"
#include "service/chain_state.hpp"
#include "service/config.hpp"
#include "service/event_subject.hpp"
#include "service/plugin_event.hpp"
#include "service/provisioner.hpp"
#include "service/slurm_cluster.hpp"
#include "service/owner_files.hpp"
#include "common/baton_contract.hpp"

#include "tests/support/process.hpp"

#include "slurm/command.hpp"
#include "slurm/sbatch_args.hpp"
#include "slurm/squeue_json.hpp"

#include <gtest/gtest.h>
#include <iterator>

#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

namespace {

using namespace baton::service;
using Json = nlohmann::json;

TEST(ChainStateNames, RoundTripEveryState)
{
    for (const auto& [state, name] : chainStateNames) {
        EXPECT_EQ(nameOf(state), name);
        EXPECT_EQ(chainStateFromName(name), state);
    }
    EXPECT_FALSE(chainStateFromName("active"));
    EXPECT_TRUE(isTerminal(ChainState::Finished));
    EXPECT_FALSE(isTerminal(ChainState::Paused));
}

// The whole state machine as a table: every state against every event, the state it leads to or "-" where
// the event is refused. The API and the tick both consult chainTransitions, so this is what both do.
TEST(ChainStateMachine, EveryStateAgainstEveryEvent)
{
    using S = ChainState;
    using E = ChainEvent;
    const std::optional<S> no;
    struct Row {
        E event;
        std::array<std::optional<S>, 8> to; // running, successor_pending, handover, paused, quarantined,
                                            // finished, failed, cancelled
    };
    const Row table[] = {
        { E::SubmitSuccessor, { S::SuccessorPending, no, no, no, no, no, no, no } },
        { E::QueueSecondSuccessor, { no, S::SuccessorPending, no, no, no, no, no, no } },
        { E::SuccessorFound, { S::SuccessorPending, no, no, no, no, no, no, no } },
        { E::SuccessorWithdrawn, { no, S::Running, no, no, no, no, no, no } },
        { E::SuccessorStarted, { no, S::Handover, no, no, no, no, no, no } },
        { E::PredecessorEnded, { no, S::Running, S::Running, no, no, no, no, no } },
        { E::TrainingDone, { S::Finished, S::Finished, S::Finished, no, no, no, no, no } },
        { E::RetryBudgetSpent, { S::Failed, S::Failed, S::Failed, no, no, no, no, no } },
        { E::JobCancelledOutside, { S::Paused, S::Paused, S::Paused, no, no, no, no, no } },
        { E::JobAdopted, { S::Running, no, no, S::Running, S::Running, no, no, no } },
        { E::Quarantine, { S::Quarantined, S::Quarantined, S::Quarantined, S::Quarantined, no, no, no, no } },
        { E::Pause, { S::Paused, S::Paused, S::Paused, no, no, no, no, no } },
        { E::Resume, { no, no, no, S::Running, S::Running, no, no, no } },
        { E::Cancel, { S::Cancelled, S::Cancelled, S::Cancelled, S::Cancelled, S::Cancelled, no, no, no } },
        { E::Resubmit, { S::Running, no, no, S::Running, S::Running, S::Running, S::Running, S::Running } },
        { E::Preempt, { S::Running, S::SuccessorPending, no, no, no, no, no, no } },
    };
    ASSERT_EQ(std::size(table), chainEventNames.size()) << "every event has a row";
    for (const Row& row : table)
        for (std::size_t i = 0; i < chainStateNames.size(); ++i) {
            const S state = chainStateNames[i].first;
            EXPECT_EQ(nextState(state, row.event), row.to[i]) << nameOf(row.event) << " from " << nameOf(state);
            EXPECT_EQ(isAllowed(state, row.event), row.to[i].has_value());
        }
    // Nothing leaves an ended state but a resubmit.
    for (const auto& [event, name] : chainEventNames)
        for (const S ended : { S::Finished, S::Failed, S::Cancelled })
            EXPECT_EQ(isAllowed(ended, event), event == E::Resubmit) << name;
}

std::vector<std::string> sbatchArgsOf(const nlohmann::json& spec)
{
    return spec.at("sbatch_args").get<std::vector<std::string>>();
}

// A chain begun with plain `sbatch --baton`: its successors ask for what slurmctld reports of the first
// job's request, whether it came from the command line or from #SBATCH lines (read from squeue's
// 24.11 document, recorded with a --gres job).
TEST(PlainSbatchSpec, SuccessorsAskForTheFirstJobsRequest)
{
    std::ifstream in(baton::test::sourceRoot() / "tests" / "data" / "squeue_2411.json");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const ClusterQueue queue = toClusterQueue(baton::slurm::parseSqueueJson(text, 1795660800));
    const ClusterJob* gpu = queue.find(7);
    ASSERT_NE(gpu, nullptr);
    EXPECT_EQ(gpu->request.gres, "gpu:1");
    const auto args = sbatchArgsOf(specFromJob(*gpu, "#!/bin/sh\n"));
    EXPECT_EQ(args, (std::vector<std::string> { "--time=60", "--nodes=1", "--job-name=gpu",
                        "--partition=debug", "--gres=gpu:1" }));
    EXPECT_EQ(baton::slurm::checkSbatchArgs(args), std::nullopt);

    ClusterJob job;
    job.id = 5;
    job.nodes = 2;
    job.name = "train";
    job.request = { "proj-a", "high", "gpu:a100:4,shard:2", "a100&ib", 16, 8, 6, 0, 4096 };
    const auto full = sbatchArgsOf(specFromJob(job, "#!/bin/sh\n"));
    EXPECT_EQ(full,
        (std::vector<std::string> { "--nodes=2", "--job-name=train", "--account=proj-a", "--qos=high",
            "--gres=gpu:a100:4,shard:2", "--constraint=a100&ib", "--ntasks=16", "--ntasks-per-node=8",
            "--cpus-per-task=6", "--mem-per-cpu=4096M" }));
    EXPECT_EQ(baton::slurm::checkSbatchArgs(full), std::nullopt);
    job.request.memPerNodeMiB = 65536;
    EXPECT_EQ(sbatchArgsOf(specFromJob(job, "")).back(), "--mem=65536M");
}

TEST(ServiceConfig, SubmitGraceMustExceedTheSlurmTimeout)
{
    ServiceConfig config;
    const std::vector<std::string> args { "--slurm-timeout-seconds", "60", "--submit-grace-seconds", "60" };
    EXPECT_THROW(applyFlags(config, args), ConfigError);
    const std::vector<std::string> fine { "--slurm-timeout-seconds", "60", "--submit-grace-seconds", "90" };
    EXPECT_TRUE(applyFlags(config, fine));
}

TEST(ServiceConfig, FileThenFlagsWithEveryKeyValidated)
{
    const std::string path = "/tmp/batond-config-" + std::to_string(getpid()) + ".json";
    std::ofstream(path)
        << R"({"listen_port": 9000, "policy": "avg", "tick_seconds": 2.5, "slurm_users": ["root"]})";
    ServiceConfig config;
    const std::vector<std::string> args { "--config", path, "--listen-port=9100", "--retry-budget", "5",
        "--retention-days", "0", "--successors-in-flight", "2" };
    EXPECT_EQ(config.successorsInFlight, 1);
    ASSERT_TRUE(applyFlags(config, args));
    EXPECT_EQ(config.successorsInFlight, 2);
    EXPECT_EQ(config.listenPort, 9100);
    EXPECT_EQ(config.policy, "avg");
    EXPECT_EQ(config.tick.count(), 2500);
    EXPECT_EQ(config.retryBudget, 5);
    EXPECT_EQ(config.retentionDays, 0);

    std::ofstream(path) << R"({"listen_prot": 9000})";
    try {
        loadConfigFile(path);
        FAIL() << "an unknown key was accepted";
    } catch (const ConfigError& error) {
        EXPECT_NE(std::string(error.what()).find("unknown key 'listen_prot'"), std::string::npos)
            << error.what();
    }
    for (const char* bad : { R"({"listen_port": 70000})", R"({"policy": "fastest"})",
             R"({"tick_seconds": "1"})", R"({"retention_days": -1})", R"({"successors_in_flight": 3})",
             R"({"successors_in_flight": 0})", R"([1, 2])", "{not json" }) {
        std::ofstream(path) << bad;
        EXPECT_THROW(loadConfigFile(path), ConfigError) << bad;
    }
    EXPECT_THROW(applyFlags(config, std::vector<std::string> { "--listen-port" }), ConfigError);
    EXPECT_THROW(applyFlags(config, std::vector<std::string> { "stray" }), ConfigError);
    EXPECT_FALSE(applyFlags(config, std::vector<std::string> { "--help" }));
    std::remove(path.c_str());
}

TEST(BoundedJson, RefusesNulInvalidUtf8AndDepth)
{
    EXPECT_EQ(parseBoundedJson(R"({"a": [1, {"b": "ü"}]})", 4)["a"][1]["b"], "ü");
    EXPECT_THROW(parseBoundedJson(std::string("{\"a\": \"x\0\"}", 11), 8), std::invalid_argument);
    EXPECT_THROW(parseBoundedJson(R"({"a": "x\u0000"})", 8), std::invalid_argument);
    EXPECT_THROW(parseBoundedJson("{\"a\": \"\xc0\xaf\"}", 8), std::invalid_argument); // overlong '/'
    EXPECT_THROW(parseBoundedJson("{\"a\": \"\xed\xa0\x80\"}", 8), std::invalid_argument); // surrogate
    EXPECT_THROW(parseBoundedJson("{\"a\": 1", 8), std::invalid_argument);
    // A million levels: refused at the bound without building (or recursing into) the value.
    const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
    EXPECT_THROW(parseBoundedJson(deep, 16), std::invalid_argument);
    EXPECT_NO_THROW(parseBoundedJson(std::string(16, '[') + std::string(16, ']'), 16));
    EXPECT_THROW(parseBoundedJson(std::string(17, '[') + std::string(17, ']'), 16), std::invalid_argument);
}

// The plugin's event read in its three forms: posted (checked strictly), stored (to process) and
// spooled (only a checkpoint report is used).
TEST(PluginEvent, PostedStoredAndSpooled)
{
    const Json posted { { "version", 2 }, { "idempotency_key", "k1" }, { "kind", "step_start" },
        { "chain", "train" }, { "job_id", 42 }, { "chain_dir", "/home/u/train" },
        { "checkpoint", { { "iteration", 7 } } } };
    const PluginEvent event = PluginEvent::posted(posted);
    EXPECT_EQ(event.idempotencyKey, "k1");
    EXPECT_EQ(event.kind, "step_start");
    EXPECT_EQ(event.chainName, "train");
    EXPECT_EQ(event.jobId, 42);
    for (const char* key : { "version", "idempotency_key", "kind", "chain", "job_id" }) {
        Json missing = posted;
        missing.erase(key);
        EXPECT_THROW(PluginEvent::posted(missing), std::invalid_argument) << key;
    }
    Json zeroJob = posted;
    zeroJob["job_id"] = 0;
    EXPECT_THROW(PluginEvent::posted(zeroJob), std::invalid_argument);
    EXPECT_THROW(PluginEvent::posted(Json::array()), std::invalid_argument);
    // Plugins of earlier releases name the seq `restart_count`, in the event and in its checkpoint:
    // during an upgrade both forms come in, and both are accepted alike.
    for (const char* key : { "seq", "restart_count" }) { // the legacy name too
        Json named = posted;
        named[key] = 3;
        named["checkpoint"][key] = 2;
        EXPECT_EQ(PluginEvent::posted(named).jobId, 42) << key;
        const auto read = PluginEvent::stored(EventRow { 5, "step_start", "train", 42, named });
        ASSERT_TRUE(read && read->checkpoint) << key;
        EXPECT_EQ((*read->checkpoint)["iteration"], 7) << key;
    }

    const auto stored = PluginEvent::stored(EventRow { 1, "step_start", "train", 42, posted });
    ASSERT_TRUE(stored);
    EXPECT_EQ(stored->chainDir, "/home/u/train");
    ASSERT_TRUE(stored->checkpoint);
    EXPECT_EQ((*stored->checkpoint)["iteration"], 7);
    EXPECT_FALSE(PluginEvent::stored(EventRow { 2, "step_start", std::nullopt, 42, posted }));
    EXPECT_FALSE(PluginEvent::stored(EventRow { 3, "step_start", "train", std::nullopt, posted }));
    EXPECT_THROW(PluginEvent::stored(EventRow { 4, "step_start", "../x", 42, posted }), std::invalid_argument);

    const auto spooled = PluginEvent::spooled(R"({"job_id": 42, "checkpoint": {"iteration": 7}})", 8);
    ASSERT_TRUE(spooled);
    EXPECT_EQ(spooled->jobId, 42);
    EXPECT_FALSE(PluginEvent::spooled(R"({"job_id": 42})", 8));
    EXPECT_FALSE(PluginEvent::spooled(R"({"checkpoint": {"iteration": 7}})", 8)->jobId);
    EXPECT_THROW(PluginEvent::spooled("{", 8), std::invalid_argument);
}

// Which chain an event's job joins, from the event's read alone: every case of registration and adoption.
TEST(EventJoin, RegisterAdoptOrAsRead)
{
    PluginEvent start;
    start.kind = "step_start";
    start.chainName = "train";
    start.jobId = 42;
    ClusterJob handSubmitted;
    handSubmitted.id = 42;
    handSubmitted.userId = 1000;
    ChainRow running;
    running.state = ChainState::Running;
    const EventSubject none;
    EventSubject ended { running, false, true, std::nullopt };

    EXPECT_EQ(joinOf(start, &handSubmitted, none), EventJoin::Register); // plain `sbatch --baton`
    EXPECT_EQ(joinOf(start, nullptr, none), EventJoin::AsRead); // not in the queue: owner unknown
    PluginEvent exit = start;
    exit.kind = "task_exit";
    EXPECT_EQ(joinOf(exit, &handSubmitted, none), EventJoin::AsRead); // only a first step registers

    EXPECT_EQ(joinOf(start, &handSubmitted, ended), EventJoin::Adopt);
    for (const char* given : { "failed", "cancelled" }) {
        ended.nextSubmissionState = given;
        EXPECT_EQ(joinOf(start, &handSubmitted, ended), EventJoin::Adopt) << given;
    }
    for (const char* live : { "intent", "submitted" }) { // baton's own successor is on its way
        ended.nextSubmissionState = live;
        EXPECT_EQ(joinOf(start, &handSubmitted, ended), EventJoin::AsRead) << live;
    }
    ended.nextSubmissionState.reset();
    ClusterJob batons = handSubmitted;
    batons.comment = "baton:key";
    EXPECT_EQ(joinOf(start, &batons, ended), EventJoin::AsRead);
    EventSubject stillRunning = ended;
    stillRunning.currentEnded = false;
    EXPECT_EQ(joinOf(start, &handSubmitted, stillRunning), EventJoin::AsRead);
    EventSubject known = ended;
    known.jobKnown = true;
    EXPECT_EQ(joinOf(start, &handSubmitted, known), EventJoin::AsRead);
    EventSubject finished = ended;
    finished.chain->state = ChainState::Finished;
    EXPECT_EQ(joinOf(start, &handSubmitted, finished), EventJoin::AsRead);
}

// A chain directory of `nobody` with a spool of two events (and an empty line).
void makeSpool(const std::filesystem::path& chainDir)
{
    const auto spool = chainDir / ".baton-spool";
    std::filesystem::create_directories(spool);
    std::ofstream(spool / "events.jsonl") << "{\"a\": 1}\n\n{\"b\": 2}\n";
    for (const auto& path : { chainDir, spool, spool / "events.jsonl" })
        ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0) << path;
}

TEST(Spool, CollectsTheOwnersEventsAsTheOwner)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to act as the owner";
    baton::test::TempDir dir;
    makeSpool(dir.path());
    EXPECT_EQ(
        collectSpool(dir.path().string(), 65534), (std::vector<std::string> { "{\"a\": 1}", "{\"b\": 2}" }));
    EXPECT_TRUE(std::filesystem::is_empty(dir.path() / ".baton-spool")); // moved aside, read, removed
    EXPECT_TRUE(collectSpool(dir.path().string(), 65534).empty()); // no spool: no lines

    // A directory the owner cannot enter is read with the owner's rights, not root's.
    baton::test::TempDir closed;
    makeSpool(closed.path());
    ASSERT_EQ(chown(closed.path().c_str(), 0, 0), 0);
    ASSERT_EQ(chmod(closed.path().c_str(), 0700), 0);
    EXPECT_THROW(collectSpool(closed.path().string(), 65534), std::runtime_error);
    EXPECT_THROW(collectSpool(dir.path().string(), 4'000'000'000), std::runtime_error); // no such user
}

// Slurm's states that are neither running nor ended as batond reads them: a held or requeued-held job may
// still run, a stopped one still holds its processes; only the terminal states are ended.
TEST(ClusterJob, HeldAndStoppedJobsAreNotEnded)
{
    const auto job = [](const char* state) {
        baton::service::ClusterJob j;
        j.state = state;
        return j;
    };
    for (const char* state : { "REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD", "REQUEUE_FED", "POWER_UP_NODE" }) {
        EXPECT_TRUE(job(state).pending()) << state;
        EXPECT_FALSE(job(state).ended()) << state;
    }
    for (const char* state : { "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING" }) {
        EXPECT_TRUE(job(state).running()) << state;
        EXPECT_FALSE(job(state).ended()) << state;
    }
    for (const char* state : { "COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED", "PREEMPTED",
             "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE" })
        EXPECT_TRUE(job(state).ended()) << state;
}

TEST(HandoverMarker, IsWrittenWholeAsTheOwnerAndOnlyWhereTheOwnerMayWrite)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to act as the owner";
    baton::test::TempDir dir;
    ASSERT_EQ(chown(dir.path().c_str(), 65534, 65534), 0);
    const auto marker = dir.path() / baton::contract::kHandoverEndedFile;
    writeHandoverFile(dir.path().string(), 65534, HandoverFile::Ended, R"({"version": 1, "seq": 3})");
    writeHandoverFile(dir.path().string(), 65534, HandoverFile::Ended, R"({"version": 1, "seq": 4})"); // replaced whole
    std::ifstream in(marker);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), R"({"version": 1, "seq": 4})");
    struct stat info { };
    ASSERT_EQ(stat(marker.c_str(), &info), 0);
    EXPECT_EQ(info.st_uid, 65534u);
    EXPECT_EQ(info.st_mode & 07777, 0600u);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1) << "no temporary left";

    // A directory of root's the owner cannot write, a link put in its place, a marker over the bound.
    baton::test::TempDir closed;
    ASSERT_EQ(chmod(closed.path().c_str(), 0755), 0);
    EXPECT_THROW(writeHandoverFile(closed.path().string(), 65534, HandoverFile::Ended, "{}"), std::runtime_error);
    EXPECT_FALSE(std::filesystem::exists(closed.path() / baton::contract::kHandoverEndedFile));
    std::filesystem::create_directory_symlink(dir.path(), closed.path() / "link");
    EXPECT_THROW(writeHandoverFile((closed.path() / "link").string(), 65534, HandoverFile::Ended, "{}"), std::runtime_error);
    EXPECT_THROW(writeHandoverFile(dir.path().string(), 65534, HandoverFile::Ended, std::string(5000, ' ')), std::runtime_error);

    // The request beside it, under its own name.
    writeHandoverFile(dir.path().string(), 65534, HandoverFile::Request, R"({"version": 1, "seq": 4})");
    std::ifstream request(dir.path() / baton::contract::kHandoverRequestFile);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(request), {}), R"({"version": 1, "seq": 4})");
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 2) << "no temporary left";
}

// Makes every renameat in this process and its children wait in the kernel for an answer that never
// comes (a seccomp user notification nobody reads), as on a file server that stopped answering.
// The listener is held by a helper that lives as long as this process: once it closes, a stalled call
// fails with ENOSYS. (Held here, it would be inherited by the stalled child itself, which would then
// never end.) Returns false when seccomp cannot do this here.
bool stallRenames()
{
    sock_filter program[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
#ifdef __NR_renameat
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_renameat, 2, 0),
#else
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_renameat2, 2, 0),
#endif
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_renameat2, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    };
    sock_fprog filter { static_cast<unsigned short>(std::size(program)), program };
    const int listener = static_cast<int>(
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &filter));
    if (listener < 0)
        return false;
    const pid_t holder = fork();
    if (holder < 0)
        return false;
    if (holder == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        for (;;)
            pause();
    }
    close(listener);
    return true;
}

// Runs `body` in a forked process whose renames stall, optionally without CAP_KILL (as batond under a
// unit that does not grant it), under a 10 s alarm. "" when the body returned 0, else what happened.
std::string inStalledProcess(bool dropCapKill, const std::function<int()>& body)
{
    // What the forked process leaves (a collector that ends once the stall is lifted with it) comes to
    // this process to be collected, not to init.
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    const pid_t child = fork();
    if (child < 0)
        return "fork failed";
    if (child == 0) {
        if (dropCapKill) {
            __user_cap_header_struct header { _LINUX_CAPABILITY_VERSION_3, 0 };
            __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] {};
            constexpr unsigned kill = 1U << CAP_KILL;
            if (syscall(SYS_capget, &header, data) != 0 || prctl(PR_CAPBSET_DROP, CAP_KILL, 0, 0, 0) != 0)
                _exit(2);
            data[0].effective &= ~kill;
            data[0].permitted &= ~kill;
            data[0].inheritable &= ~kill;
            if (syscall(SYS_capset, &header, data) != 0)
                _exit(2);
        }
        if (!stallRenames()) {
            std::perror("seccomp");
            _exit(3);
        }
        alarm(10);
        int status = 1;
        try {
            status = body();
        } catch (const std::exception& error) {
            std::fprintf(stderr, "%s\n", error.what());
        }
        _exit(status);
    }
    int status = 0;
    waitpid(child, &status, 0);
    for (int i = 0; i < 200 && waitpid(-1, nullptr, WNOHANG) >= 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (WIFSIGNALED(status))
        return "the collector held the caller (killed by signal " + std::to_string(WTERMSIG(status)) + ")";
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        return "seccomp";
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return "failed with status " + std::to_string(status);
    return "";
}

// A collector stuck in the kernel as the owner: batond with CAP_KILL kills it at the timeout; without,
// it cannot and leaves it behind; either way collectSpool throws soon after its timeout instead of
// waiting (the old collector waited for it forever: the alarm ended it).
TEST(Spool, AStuckCollectorDoesNotHoldTheTick)
{
    if (getuid() != 0)
        GTEST_SKIP() << "needs root to act as the owner";
    baton::test::TempDir dir;
    makeSpool(dir.path());
    for (const bool dropCapKill : { false, true }) {
        const std::string failure = inStalledProcess(dropCapKill, [&] {
            const auto before = baton::slurm::abandonedChildren();
            const auto started = std::chrono::steady_clock::now();
            try {
                collectSpool(dir.path().string(), 65534, 1 << 20, std::chrono::milliseconds(300));
                std::fprintf(stderr, "a stalled collector returned lines\n");
                return 1;
            } catch (const std::runtime_error& error) {
                const auto took = std::chrono::steady_clock::now() - started;
                const bool abandoned
                    = std::string(error.what()).find("could not be killed") != std::string::npos;
                if (took > std::chrono::milliseconds(1800) || abandoned != dropCapKill
                    || baton::slurm::abandonedChildren() != before + (dropCapKill ? 1 : 0)) {
                    std::fprintf(stderr, "%s (after %lld ms)\n", error.what(),
                        static_cast<long long>(
                            std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
                    return 1;
                }
            }
            return 0;
        });
        if (failure == "seccomp")
            GTEST_SKIP() << "seccomp user notifications are not available here";
        EXPECT_EQ(failure, "") << (dropCapKill ? "without CAP_KILL" : "with CAP_KILL");
    }
}

} // namespace
