// spank_baton.so inside a real slurmctld + slurmd: options at submission, the BATON_* environment in
// the tasks, chain directories created as the job user, refusals, and events posted or spooled.
#include "common/munge_credential.hpp"
#include "tests/support/http_sink.hpp"
#include "tests/support/services.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace {

using baton::test::ProcessResult;
using baton::test::run;
using baton::test::SlurmCluster;
using baton::test::TempDir;
using testing::HasSubstr;
namespace fs = std::filesystem;

constexpr uid_t nobody = 65534;
const std::string pluginPath = SPANK_BATON_PATH;

// Runs a Slurm command against `cluster` (several clusters may exist at once).
ProcessResult slurm(const SlurmCluster& cluster, const std::vector<std::string>& argv)
{
    setenv("SLURM_CONF", cluster.slurmConf().c_str(), 1);
    return run(argv, std::chrono::seconds(90));
}

std::map<std::string, std::string> variables(const std::string& output)
{
    std::map<std::string, std::string> vars;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
        const auto equals = line.find('=');
        if (equals != std::string::npos && line.find(' ') > equals) {
            vars[line.substr(0, equals)] = line.substr(equals + 1);
        }
    }
    return vars;
}

std::string readText(const fs::path& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<nlohmann::json> jsonLines(const std::string& text)
{
    std::vector<nlohmann::json> events;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        events.push_back(nlohmann::json::parse(line));
    }
    return events;
}

struct stat statOf(const fs::path& path)
{
    struct stat info { };
    EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
    return info;
}

std::string jobIdOf(const ProcessResult& submitted)
{
    const auto& text = submitted.output;
    const auto start = text.find("Submitted batch job ");
    return start == std::string::npos ? "" : text.substr(start + 20, text.find('\n', start) - start - 20);
}

// A time field of `scontrol -o show job` (EndTime=2026-11-21T21:19:28, StartTime=...) as epoch seconds
// (local time, like Slurm).
long long timeOf(const std::string& scontrolOutput, const std::string& field)
{
    const auto start = scontrolOutput.find(" " + field);
    if (start == std::string::npos) {
        return -1;
    }
    std::tm tm {};
    tm.tm_isdst = -1;
    if (!strptime(scontrolOutput.c_str() + start + 1 + field.size(), "%Y-%m-%dT%H:%M:%S", &tm)) {
        return -1;
    }
    return static_cast<long long>(std::mktime(&tm));
}

long long endTimeOf(const std::string& scontrolOutput) { return timeOf(scontrolOutput, "EndTime="); }

// A stand-in for batond's event endpoint: a real HTTP server on a free loopback port.
class EventServer : public baton::test::HttpSink {
public:
    EventServer()
        : HttpSink("", "/v1/events", 202)
    { }

    // Waits until `count` events of the job have arrived and returns them.
    std::vector<nlohmann::json> eventsOf(long long jobId, std::size_t count)
    {
        std::vector<nlohmann::json> found;
        for (const auto& request : requestsOf(jobId, count)) {
            found.push_back(nlohmann::json::parse(request.body));
        }
        return found;
    }

    // The same, with each request's target and Authorization header.
    std::vector<Received> requestsOf(long long jobId, std::size_t count)
    {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        for (;;) {
            std::vector<Received> found;
            for (const auto& request : received()) {
                if (nlohmann::json::parse(request.body).value("job_id", -1LL) == jobId) {
                    found.push_back(request);
                }
            }
            if (found.size() >= count || std::chrono::steady_clock::now() > deadline) {
                return found;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
};

// Directories the jobs use; world-traversable so that jobs of `nobody` reach them.
struct Layout {
    TempDir base { "baton-spank" };
    fs::path chains = base.path() / "chains";
    fs::path allowed = base.path() / "allowed";
    fs::path target = base.path() / "target";
    fs::path local = base.path() / "local"; // node-local checkpoints (two-level storage)

    Layout()
    {
        ::chmod(base.path().c_str(), 0755);
        for (const auto& dir : { chains, allowed, target, local }) {
            fs::create_directory(dir);
            ::chmod(dir.c_str(), 01777);
        }
    }
    std::string plugstack(const std::string& url, const std::string& extra = "") const
    {
        return "required " + pluginPath + " chain_root=" + chains.string()
            + "/%u allowed_prefixes=" + allowed.string() + " url=" + url + " report_timeout=1 local_root="
            + local.string() + "/%u/%n drain_rate=500" + extra;
    }
};

class SpankPlugin : public testing::Test {
protected:
    static void SetUpTestSuite()
    {
        layout_ = new Layout;
        server_ = new EventServer;
        cluster_ = new SlurmCluster({ layout_->plugstack(server_->url()) });
    }
    static void TearDownTestSuite()
    {
        delete cluster_;
        delete server_;
        delete layout_;
    }
    static ProcessResult slurm(const std::vector<std::string>& argv) { return ::slurm(*cluster_, argv); }

    // srun as nobody, once the node is free (see SlurmCluster::waitUntilIdle); through runuser, since
    // srun --uid is gone from Slurm 23.11 on.
    static ProcessResult srunAsNobody(const std::vector<std::string>& args)
    {
        cluster_->waitUntilIdle();
        std::vector<std::string> argv { "runuser", "-u", "nobody", "--", "srun", "--chdir=/" };
        argv.insert(argv.end(), args.begin(), args.end());
        return slurm(argv);
    }

    static Layout* layout_;
    static EventServer* server_;
    static SlurmCluster* cluster_;
};

Layout* SpankPlugin::layout_ = nullptr;
EventServer* SpankPlugin::server_ = nullptr;
SlurmCluster* SpankPlugin::cluster_ = nullptr;

TEST_F(SpankPlugin, SrunTasksSeeEveryVariableAndTheJobsEndTime)
{
    const auto result = slurm({ "srun", "--baton=envchain", "--baton-overhead=7.5", "--baton-margin=90",
        "--time=2", "sh", "-c", "env; scontrol -o show job \"$SLURM_JOB_ID\"" });
    ASSERT_EQ(result.exitCode, 0) << result.output;
    auto vars = variables(result.output);
    EXPECT_EQ(vars["BATON_CHAIN"], "envchain");
    EXPECT_EQ(vars["BATON_CHAIN_DIR"], (layout_->chains / "root" / "envchain").string());
    EXPECT_EQ(vars["BATON_JOB_ID"], vars["SLURM_JOB_ID"]);
    EXPECT_EQ(vars["BATON_CHAIN_SEQ"], "0");
    EXPECT_EQ(vars["BATON_RESTART_COUNT"], "0") << "the deprecated alias of BATON_CHAIN_SEQ";
    EXPECT_EQ(vars["BATON_DEADLINE_MARGIN"], "90");
    EXPECT_EQ(vars["BATON_OVERHEAD"], "7.5");
    EXPECT_EQ(vars["BATON_KEEP"], "2");
    EXPECT_EQ(vars["BATON_PROVISIONER_URL"], server_->url());
    EXPECT_EQ(vars["BATON_LOCAL_DIR"], (layout_->local / "root" / vars["SLURMD_NODENAME"] / "envchain").string());
    EXPECT_EQ(vars["BATON_LOCAL_KEEP"], "1");
    EXPECT_EQ(vars["BATON_DRAIN_MBPS"], "500");
    const long long endTime = endTimeOf(result.output);
    ASSERT_GT(endTime, 0) << result.output;
    EXPECT_NEAR(std::stoll(vars["BATON_DEADLINE"]), endTime, 3) << result.output;
    EXPECT_NEAR(endTime - std::time(nullptr), 120, 30);

    EXPECT_EQ(vars.count("BATON_HANDOVER_WAIT"), 0u) << "the first job of a chain has no predecessor";

    const long long jobId = std::stoll(vars["SLURM_JOB_ID"]);
    const auto requests = server_->requestsOf(jobId, 2);
    ASSERT_EQ(requests.size(), 2u);
    std::vector<nlohmann::json> events;
    for (const auto& request : requests) {
        events.push_back(nlohmann::json::parse(request.body));
        // Signed by slurmstepd as root, for exactly this request.
        const std::string scheme(baton::munge::authorizationScheme);
        ASSERT_EQ(request.authorization.rfind(scheme, 0), 0u) << request.authorization;
        const auto identity = baton::munge::decode(request.authorization.substr(scheme.size()));
        EXPECT_EQ(identity.uid, 0u);
        EXPECT_EQ(request.target, "/v1/events");
        EXPECT_EQ(identity.payload, baton::munge::requestPayload("POST", request.target, request.body));
    }
    EXPECT_EQ(events[0]["kind"], "step_start");
    EXPECT_EQ(events[1]["kind"], "task_exit");
    EXPECT_EQ(events[1]["exit_status"], 0);
    const std::string node = events[0]["node"];
    EXPECT_EQ(events[0]["idempotency_key"], std::to_string(jobId) + ".0." + node + ".0.step_start");
    EXPECT_EQ(events[1]["idempotency_key"], std::to_string(jobId) + ".0." + node + ".0.task_exit");
    EXPECT_EQ(events[1]["task"], 0);
    EXPECT_EQ(events[1]["tasks_exited"], 1);
    for (const auto& event : events) {
        EXPECT_EQ(event["version"], 2);
        EXPECT_EQ(event["requeue_count"], 0);
        EXPECT_EQ(event["chain"], "envchain");
        EXPECT_EQ(event["step"], "0");
        // Slurm 23.02 and later give the end time to the tasks only (BATON_DEADLINE is set in
        // task_init): the events, sent by slurmstepd, then carry none.
        if (!event["deadline_unix"].is_null()) {
            EXPECT_EQ(event["deadline_unix"], std::stoll(vars["BATON_DEADLINE"]));
        }
    }
    EXPECT_FALSE(fs::exists(layout_->chains / "root" / "envchain" / ".baton-spool"));
}

TEST_F(SpankPlugin, BatchJobsOfAChainCountRestartsAndDefaultToTheJobName)
{
    for (int expected = 0; expected < 2; ++expected) {
        const fs::path out = layout_->base.path() / ("batch" + std::to_string(expected) + ".out");
        const auto submitted = slurm({ "sbatch", "--wait", "-J", "trainer", "--baton", "--time=2",
            "--output=" + out.string(), "--wrap=env; srun env | grep '^BATON_CHAIN=\\|^BATON_LOCAL_DIR='" });
        ASSERT_EQ(submitted.exitCode, 0) << submitted.output;
        const std::string text = readText(out);
        auto vars = variables(text);
        EXPECT_EQ(vars["BATON_CHAIN"], "trainer") << text;
        EXPECT_EQ(vars["BATON_CHAIN_DIR"], (layout_->chains / "root" / "trainer").string());
        EXPECT_EQ(vars["BATON_JOB_ID"], jobIdOf(submitted));
        EXPECT_EQ(vars["BATON_CHAIN_SEQ"], std::to_string(expected));
        EXPECT_EQ(vars["BATON_RESTART_COUNT"], vars["BATON_CHAIN_SEQ"]) << "the deprecated alias";
        // %n is Slurm's node name in the batch step as in its srun steps (the host name may differ).
        const std::string local = (layout_->local / "root" / vars["SLURMD_NODENAME"] / "trainer").string();
        const std::string localLine = "BATON_LOCAL_DIR=" + local + "\n";
        const auto first = text.find(localLine);
        ASSERT_NE(first, std::string::npos) << text;
        EXPECT_NE(text.find(localLine, first + 1), std::string::npos) << "the srun step's differs:\n" << text;
        EXPECT_EQ(vars["BATON_OVERHEAD"], "5");
        EXPECT_EQ(vars["BATON_DEADLINE_MARGIN"], "60");
        // A successor waits for its predecessor's final checkpoint (plugstack default 120 s).
        EXPECT_EQ(vars.count("BATON_HANDOVER_WAIT") ? vars["BATON_HANDOVER_WAIT"] : "unset",
            expected == 0 ? "unset" : "120")
            << text;
        // The step inside the job inherits --baton from the batch script's environment.
        std::size_t seen = 0;
        for (auto at = text.find("BATON_CHAIN=trainer\n"); at != std::string::npos;
             at = text.find("BATON_CHAIN=trainer\n", at + 1)) {
            ++seen;
        }
        EXPECT_EQ(seen, 2u) << text;
    }
    // batond names the seq of each job it submits: the batch script and its steps run as that seq,
    // whatever the order of the chain's starts (two successors in flight may start in one second).
    const fs::path out = layout_->base.path() / "batch-seq.out";
    const auto submitted = slurm({ "sbatch", "--wait", "-J", "trainer", "--baton", "--baton-seq=7", "--time=2",
        "--output=" + out.string(), "--wrap=env; srun env | grep '^BATON_CHAIN_SEQ='" });
    ASSERT_EQ(submitted.exitCode, 0) << submitted.output;
    const std::string text = readText(out);
    const auto batch = text.find("BATON_CHAIN_SEQ=7\n");
    ASSERT_NE(batch, std::string::npos) << text;
    EXPECT_NE(text.find("BATON_CHAIN_SEQ=7\n", batch + 1), std::string::npos) << "the srun step's differs:\n" << text;
}

TEST_F(SpankPlugin, BadOptionValuesFailAtSubmissionWithTheMessage)
{
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        { { "srun", "--baton-overhead=abc", "true" }, "--baton-overhead: overhead must be a percentage" },
        { { "srun", "--baton-overhead=100", "true" }, "greater than 0 and less than 100, got '100'" },
        { { "srun", "--baton-margin=-5", "true" }, "--baton-margin: margin must be a whole number" },
        { { "srun", "--baton=a/b", "true" }, "--baton: chain name must be" },
        { { "sbatch", "--baton-overhead=0", "--wrap=true" }, "--baton-overhead: overhead must be" },
        { { "sbatch", "--baton-margin=ten", "--wrap=true" }, "got 'ten'" },
        { { "sbatch", "--baton-seq=-1", "--wrap=true" }, "--baton-seq: seq must be a whole number" },
        { { "salloc", "--baton=.hidden", "true" }, "chain name must be" },
    };
    for (const auto& [argv, message] : cases) {
        const auto result = slurm(argv);
        EXPECT_NE(result.exitCode, 0) << argv[1];
        EXPECT_THAT(result.output, HasSubstr("error: baton: ")) << result.output;
        EXPECT_THAT(result.output, HasSubstr(message)) << result.output;
        EXPECT_THAT(result.output, testing::Not(HasSubstr("Submitted batch job"))) << result.output;
    }
}

TEST_F(SpankPlugin, TraversalSymlinksAndOutsidePrefixesAreRefused)
{
    const auto traversal
        = slurm({ "srun", "--baton", "--baton-dir=" + layout_->allowed.string() + "/../target/x", "true" });
    EXPECT_NE(traversal.exitCode, 0);
    EXPECT_THAT(traversal.output, HasSubstr("contains '..' (path traversal)"));

    const auto outside
        = slurm({ "sbatch", "--baton", "--baton-dir=" + layout_->target.string() + "/x", "--wrap=true" });
    EXPECT_NE(outside.exitCode, 0);
    EXPECT_THAT(outside.output, HasSubstr("is outside the allowed prefixes"));

    // A link below the prefix can only be seen on the node: the job fails and nothing is created.
    fs::create_directory_symlink(layout_->target, layout_->allowed / "link");
    const auto linked = slurm({ "srun", "--baton",
        "--baton-dir=" + (layout_->allowed / "link" / "sub").string(), "--time=1", "true" });
    EXPECT_NE(linked.exitCode, 0) << linked.output;
    EXPECT_THAT(linked.output, HasSubstr("is a symbolic link below the administrator's"));
    EXPECT_FALSE(fs::exists(layout_->target / "sub"));
    const auto drained = slurm({ "sinfo", "-h", "-o", "%t" });
    EXPECT_THAT(drained.output, testing::Not(HasSubstr("drain"))) << drained.output;
}

// On a scratch disk every user writes to (local_root=<local>/%u/%n, <local> sticky), a user who makes
// <local>/<victim> first would control every name below it: the victim's steps get no node-local level
// (one level, slurmd's log says why) and nothing is created in the planted directory.
TEST_F(SpankPlugin, ANodeLocalRootAnotherUserPreparedIsNotUsed)
{
    const fs::path planted = layout_->local / "nobody";
    fs::create_directories(planted);
    ASSERT_EQ(::chown(planted.c_str(), 1, 1), 0); // daemon's, made before nobody's first job
    ::chmod(planted.c_str(), 0755);
    struct Cleanup {
        fs::path dir;
        ~Cleanup() { fs::remove_all(dir); }
    } cleanup { planted };
    const auto result = srunAsNobody({ "--baton=localtrust", "--time=1", "env" });
    ASSERT_EQ(result.exitCode, 0) << result.output;
    auto vars = variables(result.output);
    EXPECT_EQ(vars.count("BATON_LOCAL_DIR"), 0u) << result.output;
    EXPECT_EQ(vars["BATON_CHAIN_DIR"], (layout_->chains / "nobody" / "localtrust").string()) << result.output;
    EXPECT_THAT(result.output, HasSubstr("node-local directory not used"));
    EXPECT_THAT(result.output, HasSubstr("'" + planted.string() + "' belongs to uid 1"));
    EXPECT_TRUE(fs::is_empty(planted));
}

// The credential of every report states uid 0, also for a job of an unprivileged user: slurmstepd
// runs user_init (step_start) with the job user's effective ids, the task callbacks as root. Before,
// step_start was signed as the job user and batond refused it.
void expectSignedByRoot(const std::vector<baton::test::HttpSink::Received>& requests)
{
    const std::string scheme(baton::munge::authorizationScheme);
    for (const auto& request : requests) {
        ASSERT_EQ(request.authorization.rfind(scheme, 0), 0u) << request.authorization;
        const auto identity = baton::munge::decode(request.authorization.substr(scheme.size()));
        EXPECT_EQ(identity.uid, 0u) << request.body;
        EXPECT_EQ(identity.payload, baton::munge::requestPayload("POST", request.target, request.body));
    }
}

TEST_F(SpankPlugin, ChainDirectoryIsCreatedAsTheJobUser)
{
    const auto result = srunAsNobody({ "--baton=userchain", "--time=1", "env" });
    ASSERT_EQ(result.exitCode, 0) << result.output;
    const fs::path dir = layout_->chains / "nobody" / "userchain";
    auto vars = variables(result.output);
    {
        const auto requests = server_->requestsOf(std::stoll(vars["SLURM_JOB_ID"]), 2);
        ASSERT_EQ(requests.size(), 2u);
        EXPECT_EQ(nlohmann::json::parse(requests[0].body)["kind"], "step_start");
        EXPECT_EQ(nlohmann::json::parse(requests[1].body)["kind"], "task_exit");
        expectSignedByRoot(requests);
    }
    EXPECT_EQ(vars["BATON_CHAIN_DIR"], dir.string());
    EXPECT_EQ(vars["BATON_CHAIN_SEQ"], "0");
    EXPECT_FALSE(vars["BATON_DEADLINE"].empty()) << result.output;
    for (const auto& path : { dir.parent_path(), dir }) {
        const auto info = statOf(path);
        EXPECT_EQ(info.st_uid, nobody) << path;
        EXPECT_EQ(info.st_gid, nobody) << path;
        EXPECT_EQ(info.st_mode & 07777, 0700u) << path;
    }
    EXPECT_EQ(statOf(dir / ".baton-jobs").st_uid, nobody);

    // Root could create this directory; the job user cannot, so the plugin must not either.
    const fs::path rootOnly = layout_->allowed / "root-only";
    fs::create_directory(rootOnly);
    ::chmod(rootOnly.c_str(), 0700);
    const auto refused
        = srunAsNobody({ "--baton", "--baton-dir=" + (rootOnly / "chain").string(), "--time=1", "true" });
    EXPECT_NE(refused.exitCode, 0);
    EXPECT_THAT(refused.output, HasSubstr("Permission denied"));
    EXPECT_FALSE(fs::exists(rootOnly / "chain"));

    // A directory of another user is not taken over.
    const auto foreign = srunAsNobody(
        { "--baton", "--baton-dir=" + (layout_->chains / "root" / "envchain").string(), "--time=1", "true" });
    EXPECT_NE(foreign.exitCode, 0);
}

// A step of several tasks on one node reports its tasks' end once (slurmstepd calls task_exit for one
// task after the other; a report each would hold up the step's end by a report_timeout per task when
// batond is slow), naming the task that failed.
TEST_F(SpankPlugin, TasksOfAStepAreReportedOncePerNode)
{
    const auto result = srunAsNobody({ "--ntasks=3", "--overcommit", "--baton=tasks", "--time=1", "sh", "-c",
        "echo job=$SLURM_JOB_ID; [ $SLURM_PROCID -ne 1 ] || exit 3" });
    EXPECT_NE(result.exitCode, 0) << result.output;
    const auto vars = variables(result.output);
    ASSERT_EQ(vars.count("job"), 1u) << result.output;
    const long long jobId = std::stoll(vars.at("job"));
    const auto requests = server_->requestsOf(jobId, 3); // waits the full time if a third arrives
    ASSERT_EQ(requests.size(), 2u);
    expectSignedByRoot(requests);
    const auto exits = nlohmann::json::parse(requests[1].body);
    EXPECT_EQ(exits["kind"], "task_exit");
    EXPECT_EQ(exits["tasks"], 3);
    EXPECT_EQ(exits["tasks_exited"], 3);
    EXPECT_EQ(exits["task"], 1);
    EXPECT_EQ(exits["exit_status"], 3);
}

// The end-to-end case: a job with a one-minute limit commits its final checkpoint before the
// limit, and the next job of the chain restores it. The program finds everything through BATON_*.
TEST_F(SpankPlugin, ChainJobCheckpointsBeforeTheLimitAndTheNextJobRestores)
{
    const fs::path first = layout_->base.path() / "chain1.out";
    const auto submitted = slurm({ "sbatch", "--wait", "--baton=ckchain", "--baton-margin=15", "--time=1",
        "--output=" + first.string(), "--wrap=exec " + std::string(CKPT_CHAIN_JOB_PATH) });
    const std::string firstJob = jobIdOf(submitted);
    ASSERT_FALSE(firstJob.empty()) << submitted.output;
    const std::string firstText = readText(first);
    EXPECT_EQ(submitted.exitCode, 0) << submitted.output << firstText;
    EXPECT_THAT(firstText, HasSubstr("seq 0\nfresh start\n"));
    EXPECT_THAT(firstText, HasSubstr("exiting\n"));

    const auto events = server_->eventsOf(std::stoll(firstJob), 2);
    ASSERT_EQ(events.size(), 2u);
    const auto state = slurm({ "scontrol", "-o", "show", "job", firstJob });
    // The event's deadline where Slurm let user_init know it (22.05), else the limit of 1 minute.
    const long long deadline = events[0]["deadline_unix"].is_null() ? timeOf(state.output, "StartTime=") + 60
                                                                     : events[0]["deadline_unix"].get<long long>();
    EXPECT_THAT(state.output, HasSubstr("JobState=COMPLETED")) << state.output;
    EXPECT_LT(endTimeOf(state.output), deadline) << "the job ended before its limit";

    // "final checkpoint iteration N committed at T"
    unsigned long long iteration = 0;
    long long at = 0;
    const auto line = firstText.find("final checkpoint iteration ");
    ASSERT_NE(line, std::string::npos) << firstText;
    ASSERT_EQ(std::sscanf(firstText.c_str() + line, "final checkpoint iteration %llu committed at %lld",
                  &iteration, &at),
        2)
        << firstText;
    EXPECT_LE(at, deadline - 15) << firstText;
    EXPECT_GE(at, deadline - 25) << "the final checkpoint comes close to deadline - margin, not at the start";
    char name[32];
    std::snprintf(name, sizeof name, "ckpt-%012llu", iteration);
    EXPECT_TRUE(fs::exists(layout_->chains / "root" / "ckchain" / name / "manifest.json"));
    // Two levels (local_root): the checkpoint committed node-locally first, then in the chain directory.
    EXPECT_EQ(events[1]["node"], events[0]["node"]);
    EXPECT_TRUE(fs::exists(layout_->local / "root" / events[1]["node"].get<std::string>() / "ckchain" / name
        / "manifest.json"));

    // The task's exit report names the final checkpoint and the policy's tuning state.
    EXPECT_EQ(events[1]["kind"], "task_exit");
    EXPECT_EQ(events[1]["exit_status"], 0);
    EXPECT_EQ(events[1]["checkpoint"]["iteration"], iteration);
    EXPECT_EQ(events[1]["checkpoint"]["name"], name);
    EXPECT_EQ(events[1]["local_checkpoint"]["iteration"], iteration) << events[1].dump();
    EXPECT_TRUE(events[1]["tuning"].is_object()) << events[1].dump();

    const fs::path second = layout_->base.path() / "chain2.out";
    const auto next
        = slurm({ "sbatch", "--wait", "--baton=ckchain", "--time=1", "--output=" + second.string(),
            "--wrap=exec " + std::string(CKPT_CHAIN_JOB_PATH) + " --run-seconds=2" });
    const std::string secondText = readText(second);
    ASSERT_EQ(next.exitCode, 0) << next.output << secondText;
    // The predecessor's final checkpoint is there already: the handover wait ends at once.
    EXPECT_THAT(secondText, HasSubstr("seq 1\n"));
    EXPECT_THAT(secondText, HasSubstr("is final, found after 0.0 s"));
    EXPECT_THAT(secondText, HasSubstr("restored iteration " + std::to_string(iteration) + " verified"));
    const auto nextEvents = server_->eventsOf(std::stoll(jobIdOf(next)), 1);
    ASSERT_FALSE(nextEvents.empty());
    EXPECT_EQ(nextEvents[0]["kind"], "step_start");
    EXPECT_EQ(nextEvents[0]["seq"], 1);
    EXPECT_EQ(nextEvents[0]["checkpoint"]["iteration"], iteration);
}

TEST(SpankPluginAlone, EventsAreSpooledWhenBatondIsAbsent)
{
    Layout layout;
    // A port that was free a moment ago and is closed now: nothing listens there.
    int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    ::bind(probe, reinterpret_cast<sockaddr*>(&address), length);
    ::getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length);
    ::close(probe);
    SlurmCluster cluster({ layout.plugstack("http://127.0.0.1:" + std::to_string(ntohs(address.sin_port))) });
    const fs::path out = layout.base.path() / "spooled.out";
    const auto submitted = slurm(cluster,
        { "sbatch", "--wait", "--baton=spooled", "--time=1", "--output=" + out.string(), "--wrap=echo ran" });
    ASSERT_EQ(submitted.exitCode, 0) << submitted.output;
    EXPECT_EQ(readText(out), "ran\n");
    const auto events
        = jsonLines(readText(layout.chains / "root" / "spooled" / ".baton-spool" / "events.jsonl"));
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0]["kind"], "step_start");
    EXPECT_EQ(events[1]["kind"], "task_exit");
    for (const auto& event : events) {
        EXPECT_EQ(std::to_string(event["job_id"].get<long long>()), jobIdOf(submitted));
        EXPECT_EQ(event["version"], 2);
        EXPECT_EQ(event["step"], "batch");
        EXPECT_EQ(event["chain"], "spooled");
    }
}

TEST(SpankPluginAlone, UnknownPlugstackKeyIsAClearError)
{
    Layout layout;
    SlurmCluster cluster({ layout.plugstack("http://127.0.0.1:1", " bogus=1") });
    for (const auto& argv : std::vector<std::vector<std::string>> {
             { "srun", "--baton", "true" }, { "sbatch", "--baton", "--wrap=true" } }) {
        const auto result = slurm(cluster, argv);
        EXPECT_NE(result.exitCode, 0);
        EXPECT_THAT(result.output, HasSubstr("baton: plugstack.conf: unknown key 'bogus'")) << result.output;
    }
}

} // namespace
