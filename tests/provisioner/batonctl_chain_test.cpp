// batonctl's chain commands against a stand-in for batond: an in-process HTTP server on loopback that
// checks each request's MUNGE credential the way batond does (decoded by munged, payload bound to the
// method, target and body) and answers with canned JSON. Checks the tables, --json, the requests sent and
// the exit code of each kind of answer.
#include "common/munge_credential.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <pwd.h>
#include <thread>
#include <unistd.h>

using baton::test::run;
using nlohmann::json;

namespace {

std::string batonctl()
{
    const char* exe = std::getenv("BATONCTL");
    return exe ? exe : "batonctl";
}

bool mungeAnswers()
{
    return run({ "sh", "-c", "munge -n | unmunge" }, std::chrono::seconds(10)).exitCode == 0;
}

// Starts munged as deploy/local/slurm.sh does when none answers (needs root and the cluster's key).
bool ensureMunge()
{
    if (mungeAnswers())
        return true;
    run({ "sh", "-c",
            "[ -r /etc/munge/munge.key ] && install -d -o munge -g munge -m 0755 /run/munge && "
            "runuser -u munge -- /usr/sbin/munged" },
        std::chrono::seconds(10));
    for (int i = 0; i < 50; ++i) {
        if (mungeAnswers())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
}

struct Received {
    std::string method;
    std::string target;
    std::string body;
};

class FakeBatond {
public:
    FakeBatond()
    {
        const auto handler = [this](const httplib::Request& request, httplib::Response& response) {
            answer(request, response);
        };
        server_.Get(".*", handler);
        server_.Post(".*", handler);
        port_ = server_.bind_to_any_port("127.0.0.1");
        thread_ = std::thread([this] { server_.listen_after_bind(); });
        while (!server_.is_running())
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ~FakeBatond()
    {
        server_.stop();
        thread_.join();
    }

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    void reply(const std::string& method, const std::string& target, int status, const std::string& body)
    {
        std::lock_guard lock(mutex_);
        canned_[method + " " + target] = { status, body };
    }
    std::vector<Received> received()
    {
        std::lock_guard lock(mutex_);
        return received_;
    }
    std::vector<std::string> credentialProblems()
    {
        std::lock_guard lock(mutex_);
        return problems_;
    }

private:
    void answer(const httplib::Request& request, httplib::Response& response)
    {
        std::lock_guard lock(mutex_);
        received_.push_back({ request.method, request.target, request.body });
        const std::string header = request.get_header_value("Authorization");
        std::string problem;
        if (header.rfind(baton::munge::authorizationScheme, 0) != 0) {
            problem = "no MUNGE credential";
        } else {
            try {
                const auto identity
                    = baton::munge::decode(header.substr(baton::munge::authorizationScheme.size()));
                if (identity.payload
                    != baton::munge::requestPayload(request.method, request.target, request.body))
                    problem = "payload does not match the request: " + identity.payload;
                else if (identity.uid != getuid())
                    problem = "credential of uid " + std::to_string(identity.uid);
            } catch (const baton::munge::MungeError& error) {
                problem = error.what();
            }
        }
        if (!problem.empty()) {
            problems_.push_back(request.method + " " + request.target + ": " + problem);
            response.status = 401;
            response.set_content(json { { "error", problem } }.dump(), "application/json");
            return;
        }
        const auto it = canned_.find(request.method + " " + request.target);
        if (it == canned_.end()) {
            response.status = 404;
            response.set_content(R"({"error":"no such chain"})", "application/json");
            return;
        }
        response.status = it->second.first;
        response.set_content(it->second.second, "application/json");
    }

    httplib::Server server_;
    int port_ = 0;
    std::thread thread_;
    std::mutex mutex_;
    std::map<std::string, std::pair<int, std::string>> canned_;
    std::vector<Received> received_;
    std::vector<std::string> problems_;
};

const char* chainsDocument = R"({"chains":[
  {"owner":"alice","owner_uid":1000,"name":"train","state":"running","seq":2,"last_handover_seq":1,
   "chain_dir":"/c/train","retries":0,"reason":null,"current_job":123,"pending_job":124,"updated_unix":1700000000,
   "policy":"checkpoint-aware","policy_from":"service"},
  {"owner":"bob","owner_uid":1001,"name":"a-much-longer-chain-name","state":"paused","seq":7,"last_handover_seq":6,
   "chain_dir":"/c/x","retries":1,"reason":"paused by owner","current_job":99,"pending_job":null,"updated_unix":1700003600,
   "policy":"reactive","policy_from":"chain"}
]})";

const char* detailDocument = R"({
  "chain":{"owner":"alice","owner_uid":1000,"name":"train","state":"running","seq":2,"last_handover_seq":1,
           "chain_dir":"/c/train","retries":0,"reason":null,"current_job":123,"pending_job":124,
           "updated_unix":1700000000,"policy":"avg","policy_from":"chain"},
  "jobs":[
    {"seq":0,"job_id":100,"state":"COMPLETED","submit_unix":1700000000,"start_unix":1700000100,"end_unix":1700003700},
    {"seq":1,"job_id":101,"state":"COMPLETED","submit_unix":1700003000,"start_unix":1700003580,"end_unix":1700007000},
    {"seq":2,"job_id":123,"state":"RUNNING","submit_unix":1700006000,"start_unix":1700007300,"end_unix":null}
  ],
  "checkpoints":[{"iteration":5000,"job_id":101,"created_unix":1700006900,"total_bytes":1073741824,
                  "final":true,"training_done":false}],
  "handovers":[{"time_unix":1700003580,"predecessor_seq":0,"from_job":100,"to_job":101,"outcome":"done"}],
  "decisions":[{"time_unix":1700003000,"policy":"checkpoint-aware","action":"submit","predicted_wait_s":580.4,
                "outcome":"started"}]
})";

std::string currentUser()
{
    const passwd* user = getpwuid(getuid());
    return user ? user->pw_name : std::to_string(getuid());
}

class BatonctlChains : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (!ensureMunge())
            GTEST_SKIP() << "munged is not running and could not be started";
        server_ = std::make_unique<FakeBatond>();
        unsetenv("BATON_SERVER");
    }
    void TearDown() override
    {
        if (server_) {
            EXPECT_TRUE(server_->credentialProblems().empty())
                << testing::PrintToString(server_->credentialProblems());
        }
    }
    // Runs `batonctl COMMAND --server URL ARGS...`: the option goes before any `--`.
    baton::test::ProcessResult batonctlRun(std::vector<std::string> args)
    {
        args.insert(args.begin() + 1, { "--server", server_->url() });
        args.insert(args.begin(), batonctl());
        return run(args);
    }

    std::unique_ptr<FakeBatond> server_;
};

TEST_F(BatonctlChains, ChainsPrintsATable)
{
    server_->reply("GET", "/v1/chains?limit=500", 200, chainsDocument);
    const auto r = batonctlRun({ "chains" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(
        r.output.find(
            "owner  name                      state    seq  current job  pending job  policy                            "
            "updated (UTC)\n"
            "alice  train                     running  2    123          124          checkpoint-aware (the service's)  "
            "2023-11-14 22:13:20\n"
            "bob    a-much-longer-chain-name  paused   7    99           -            reactive                          "
            "2023-11-14 23:13:20\n"),
        std::string::npos)
        << r.output;
}

TEST_F(BatonctlChains, StateFilterIsSentAsAQueryAndJsonHasEveryPage)
{
    const std::string document = R"({"chains":[], "next_after":null})";
    server_->reply("GET", "/v1/chains?limit=500&state=running", 200, document);
    const auto r = batonctlRun({ "chains", "--state", "running", "--json" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(r.output, "{\"chains\":[]}\n");
    const auto table = batonctlRun({ "chains", "--state=running" });
    EXPECT_EQ(table.exitCode, 0) << table.output;
    EXPECT_EQ(table.output, "no chains\n");
}

// A second successor queued behind the pending one (successors_in_flight 2) is named after it.
TEST_F(BatonctlChains, ShowNamesASecondPendingJob)
{
    std::string document = detailDocument;
    const std::string pending = "\"pending_job\":124,";
    document.replace(document.find(pending), pending.size(), pending + "\"second_pending_job\":125,");
    // A successor cancelled while queued between jobs 101 and 123: no link of the chain.
    const std::string third = "\n    {\"seq\":2,\"job_id\":123,";
    document.insert(document.find(third), "\n    {\"seq\":2,\"job_id\":122,\"state\":\"CANCELLED\","
                                          "\"submit_unix\":1700005000,\"start_unix\":1700006500,"
                                          "\"end_unix\":1700006500,\"withdrawn\":true},");
    server_->reply("GET", "/v1/chains/alice/train", 200, document);
    const auto r = batonctlRun({ "show", "alice/train" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("  current job 123, pending job 124, then job 125\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("CANCELLED  2023-11-14 23:36:40  2023-11-15 00:01:40  2023-11-15 00:01:40  withdrawn\n"),
        std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("  +300\n"), std::string::npos) << "job 123 follows job 101, not the withdrawn one\n"
                                                          << r.output;
}

TEST_F(BatonctlChains, ShowPrintsTheChainAndItsTables)
{
    server_->reply("GET", "/v1/chains/alice/train", 200, detailDocument);
    const auto r = batonctlRun({ "show", "alice/train" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(
        r.output.rfind("chain alice/train\n  state running, seq 2, last handover from seq 1, retries 0\n"
                       "  current job 123, pending job 124\n  policy avg\n",
            0),
        0u)
        << r.output;
    EXPECT_NE(
        r.output.find(
            "seq  job  state      submit               start                end                  "
            "interruption(s)\n"
            "0    100  COMPLETED  2023-11-14 22:13:20  2023-11-14 22:15:00  2023-11-14 23:15:00  -\n"
            "1    101  COMPLETED  2023-11-14 23:03:20  2023-11-14 23:13:00  2023-11-15 00:10:00  -120\n"
            "2    123  RUNNING    2023-11-14 23:53:20  2023-11-15 00:15:00  -                    +300\n"),
        std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("5000       101  2023-11-15 00:08:20  1.0 GiB  yes    no"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("2023-11-14 23:13:00  0         100       101     done"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("2023-11-14 23:03:20  checkpoint-aware  submit  580                started"),
        std::string::npos)
        << r.output;

    const auto raw = batonctlRun({ "show", "alice/train", "--json" });
    ASSERT_EQ(raw.exitCode, 0) << raw.output;
    EXPECT_EQ(raw.output, std::string(detailDocument) + "\n");
}

TEST_F(BatonctlChains, WithoutAnOwnerShowAsksForTheUsersOwnChain)
{
    const std::string target = "/v1/chains/" + currentUser() + "/my%20run";
    server_->reply("GET", target, 200, R"({"chain":{"owner":"me","name":"my run","state":"paused"}})");
    const auto r = batonctlRun({ "show", "my run" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("chain me/my run\n  state paused"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\njobs"), std::string::npos);
    ASSERT_FALSE(server_->received().empty());
    EXPECT_EQ(server_->received().back().target, target);
}

TEST_F(BatonctlChains, SubmitSendsTheScriptAndSbatchArguments)
{
    baton::test::TempDir dir("baton-ctl-submit");
    const auto script = dir.path() / "job.sh";
    const std::string text = "#!/bin/bash\n#SBATCH -N 1\nsrun python train.py \"$@\"\n";
    std::ofstream(script) << text;
    server_->reply("POST", "/v1/chains", 201,
        R"({"chain":{"owner":"alice","name":"train","state":"pending","seq":0},"job_id":4242})");
    const auto r = batonctlRun({ "submit", "--chain", "train", "--workdir", dir.path().string(),
        script.string(), "--", "--time=1:00:00", "-N", "2" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(r.output, "submitted chain alice/train: first job 4242\n");
    const auto requests = server_->received();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].method, "POST");
    const auto body = json::parse(requests[0].body);
    EXPECT_EQ(body["name"], "train");
    EXPECT_EQ(body["script"], text);
    EXPECT_EQ(body["sbatch_args"], (json { "--time=1:00:00", "-N", "2" }));
    EXPECT_EQ(body["workdir"], std::filesystem::canonical(dir.path()).string());

    // Without --workdir, the current directory (the test's own) is sent, as an absolute path.
    const auto here = batonctlRun({ "submit", "--chain", "train", script.string() });
    ASSERT_EQ(here.exitCode, 0) << here.output;
    const auto second = json::parse(server_->received().back().body);
    EXPECT_EQ(second["workdir"], std::filesystem::current_path().string());
    EXPECT_EQ(second["sbatch_args"], json::array());
    EXPECT_FALSE(second.contains("policy")) << "without --policy, the service's";

    // --policy names the chain's own.
    const auto own = batonctlRun({ "submit", "--chain", "train", "--policy", "reactive", script.string() });
    ASSERT_EQ(own.exitCode, 0) << own.output;
    EXPECT_EQ(json::parse(server_->received().back().body)["policy"], "reactive");
}

TEST_F(BatonctlChains, PolicyPostsTheChainsOwnOrNullForTheServices)
{
    server_->reply("POST", "/v1/chains/alice/train/policy", 200,
        R"({"chain":{"owner":"alice","name":"train","policy":"avg","policy_from":"chain"}})");
    const auto r = batonctlRun({ "policy", "alice/train", "avg" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(r.output, "chain alice/train: policy avg\n");
    EXPECT_EQ(json::parse(server_->received().back().body), (json { { "policy", "avg" } }));

    server_->reply("POST", "/v1/chains/alice/train/policy", 200,
        R"({"chain":{"owner":"alice","name":"train","policy":"predict","policy_from":"service"}})");
    const auto back = batonctlRun({ "policy", "alice/train", "default" });
    ASSERT_EQ(back.exitCode, 0) << back.output;
    EXPECT_EQ(back.output, "chain alice/train: policy predict (the service's)\n");
    EXPECT_EQ(json::parse(server_->received().back().body), (json { { "policy", nullptr } }));
}

TEST_F(BatonctlChains, TransitionsPostToTheChain)
{
    for (const std::string action : { "resubmit", "preempt", "pause", "resume", "cancel" }) {
        server_->reply("POST", "/v1/chains/alice/train/" + action, 200,
            R"({"chain":{"owner":"alice","name":"train","state":"paused","current_job":123,"pending_job":null}})");
        const auto r = batonctlRun({ action, "alice/train" });
        EXPECT_EQ(r.exitCode, 0) << action << ": " << r.output;
        EXPECT_EQ(r.output, action + " alice/train: state paused, current job 123, pending job -\n");
        EXPECT_EQ(server_->received().back().body, "");
    }
}

TEST_F(BatonctlChains, ErrorsMapToExitCodes)
{
    const std::pair<int, int> cases[]
        = { { 404, 3 }, { 401, 4 }, { 403, 4 }, { 409, 5 }, { 400, 1 }, { 500, 1 }, { 503, 1 } };
    for (const auto& [status, exitCode] : cases) {
        server_->reply("POST", "/v1/chains/alice/train/pause", status,
            json { { "error", "refused with " + std::to_string(status) } }.dump());
        const auto r = batonctlRun({ "pause", "alice/train" });
        EXPECT_EQ(r.exitCode, exitCode) << status << ": " << r.output;
        EXPECT_NE(r.output.find("batonctl: batond refused: refused with " + std::to_string(status) + " (HTTP "
                      + std::to_string(status)),
            std::string::npos)
            << r.output;
    }
    // An unknown chain: the stand-in's 404.
    const auto missing = batonctlRun({ "show", "alice/nothing" });
    EXPECT_EQ(missing.exitCode, 3) << missing.output;
    EXPECT_NE(missing.output.find("batond refused: no such chain"), std::string::npos) << missing.output;

    // A body that is not batond's JSON is shown as it came.
    server_->reply("GET", "/v1/chains?limit=500", 502, "Bad Gateway");
    const auto proxy = batonctlRun({ "chains" });
    EXPECT_EQ(proxy.exitCode, 1);
    EXPECT_NE(proxy.output.find("batond refused: Bad Gateway (HTTP 502"), std::string::npos) << proxy.output;
}

// The service answers a page at a time: batonctl follows next_after and shows one list.
TEST_F(BatonctlChains, EveryPageIsRead)
{
    server_->reply("GET", "/v1/chains?limit=500", 200,
        R"({"chains":[{"owner":"alice","name":"one","state":"running","seq":0}],"next_after":7})");
    server_->reply("GET", "/v1/chains?limit=500&after=7", 200,
        R"({"chains":[{"owner":"bob","name":"two","state":"paused","seq":3}],"next_after":null})");
    const auto r = batonctlRun({ "chains", "--json" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto doc = nlohmann::json::parse(r.output);
    ASSERT_EQ(doc["chains"].size(), 2u) << r.output;
    EXPECT_EQ(doc["chains"][1]["name"], "two");
}

TEST_F(BatonctlChains, TheServerComesFromTheOptionTheEnvironmentOrTheDefault)
{
    server_->reply("GET", "/v1/chains?limit=500", 200, chainsDocument);
    setenv("BATON_SERVER", server_->url().c_str(), 1);
    const auto fromEnvironment = run({ batonctl(), "chains" });
    unsetenv("BATON_SERVER");
    EXPECT_EQ(fromEnvironment.exitCode, 0) << fromEnvironment.output;
    EXPECT_NE(fromEnvironment.output.find("alice"), std::string::npos);

    // A path prefix (batond behind a proxy) is part of the signed target.
    server_->reply("GET", "/api/v1/chains?limit=500", 200, chainsDocument);
    const auto prefixed = run({ batonctl(), "chains", "--server", server_->url() + "/api/" });
    EXPECT_EQ(prefixed.exitCode, 0) << prefixed.output;
    EXPECT_EQ(server_->received().back().target, "/api/v1/chains?limit=500");

    // Nobody listens on port 1: the message says where batonctl looked and how to change it.
    const auto unreachable
        = run({ batonctl(), "chains", "--server", "http://127.0.0.1:1", "--timeout", "5" });
    EXPECT_EQ(unreachable.exitCode, 1) << unreachable.output;
    EXPECT_NE(unreachable.output.find("cannot reach batond at http://127.0.0.1:1"), std::string::npos)
        << unreachable.output;
    EXPECT_NE(unreachable.output.find("--server URL or $BATON_SERVER"), std::string::npos)
        << unreachable.output;
}

TEST_F(BatonctlChains, UsageErrors)
{
    baton::test::TempDir dir("baton-ctl-usage");
    const auto script = dir.path() / "job.sh";
    std::ofstream(script) << "#!/bin/sh\n";
    for (const auto& args :
        std::vector<std::vector<std::string>> { { "show" }, { "show", "a/b/c" }, { "chains", "--bogus" },
            { "chains", "--state" }, { "submit", script.string() }, { "submit", "--chain", "x" },
            { "pause", "a", "b" }, { "chains", "--server", "ftp://x" }, { "chains", "--timeout", "0" } }) {
        auto full = args;
        full.insert(full.begin(), batonctl());
        const auto r = run(full);
        EXPECT_EQ(r.exitCode, 2) << testing::PrintToString(args) << "\n" << r.output;
        EXPECT_NE(r.output.find("usage"), std::string::npos) << testing::PrintToString(args) << r.output;
    }
    EXPECT_TRUE(server_->received().empty());
    const auto help = run({ batonctl(), "show", "--help" });
    EXPECT_EQ(help.exitCode, 0);
    EXPECT_NE(help.output.find("usage: batonctl show [options] CHAIN"), std::string::npos) << help.output;
    EXPECT_NE(help.output.find("--server URL"), std::string::npos) << help.output;

    const auto absent = run({ batonctl(), "submit", "--chain", "x", (dir.path() / "absent.sh").string() });
    EXPECT_EQ(absent.exitCode, 1) << absent.output;
    EXPECT_NE(absent.output.find("cannot read the batch script"), std::string::npos) << absent.output;
}

} // namespace
