// batond against real services: a private PostgreSQL, a private single-node Slurm with spank_baton.so,
// and munged. A chain of 1-minute jobs running a real checkpointing program completes through
// handovers while the active batond is SIGKILLed again and again (two instances: the standby takes
// over); requests that are not signed by the right user, replayed, malformed, oversized or too deep are
// refused and change nothing; /metrics passes promtool.
#include "tests/support/batond_client.hpp"
#include "tests/support/services.hpp"

#include "common/munge_credential.hpp"
#include "db/connection.hpp"
#include "db/migrations.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <future>
#include <map>
#include <netinet/in.h>
#include <random>
#include <set>
#include <sstream>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

using namespace baton::test; // processes, services and the batond client
using Batond = BatondProcess;
using Json = nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr uid_t nobody = 65534;

// A peer that closes early (the trickling clients batond cuts off) must make a write fail with EPIPE,
// not kill the test.
[[maybe_unused]] const bool sigpipeIgnored = [] {
    std::signal(SIGPIPE, SIG_IGN);
    return true;
}();

HttpReply signedRequest(
    int port, const std::string& method, const std::string& target, const std::string& body, uid_t uid)
{
    return send(port, method, target, body,
        "MUNGE " + credentialAs(uid, baton::munge::requestPayload(method, target, body)));
}

bool waitFor(const std::function<bool()>& condition, std::chrono::seconds limit)
{
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (condition())
            return true;
        std::this_thread::sleep_for(250ms);
    }
    return condition();
}

class BatondService : public testing::Test {
protected:
    static void SetUpTestSuite()
    {
        base_ = new TempDir("baton-batond");
        ::chmod(base_->path().c_str(), 0755);
        for (const char* dir : { "chains", "work" }) {
            fs::create_directory(base_->path() / dir);
            ::chmod((base_->path() / dir).c_str(), 01777);
        }
        pg_ = new PostgresServer();
        conninfo_ = new std::string(pg_->createDatabase("baton"));
        baton::db::Connection connection(*conninfo_);
        baton::db::migrate(connection);
        ports_[0] = freePort();
        ports_[1] = freePort();
        // The plugin reports to the first instance; events sent while it is down are spooled and
        // collected by the active instance when the job ends.
        plugstack_ = new std::string("required " + std::string(SPANK_BATON_PATH) + " chain_root="
            + (base_->path() / "chains").string() + "/%u url=http://127.0.0.1:" + std::to_string(ports_[0])
            + " report_timeout=2 margin=10 handover_wait=60");
        slurm_ = new SlurmCluster({ *plugstack_ });
        // Jobs are submitted as their owner, who must read slurm.conf.
        ::chmod(slurm_->dir().c_str(), 0755);
    }
    static void TearDownTestSuite()
    {
        delete slurm_;
        delete plugstack_;
        delete conninfo_;
        delete pg_;
        delete base_;
    }

    static std::vector<std::string> batondArgs(int port, const std::string& name)
    {
        return { "--database", *conninfo_, "--listen-port", std::to_string(port), "--tick-seconds", "1",
            "--policy", "avg", "--submit-lead-seconds", "40", "--instance-name", name,
            "--submit-grace-seconds", "16", "--handover-timeout-seconds", "60", "--slurm-timeout-seconds",
            "10", "--log-level", "debug" };
    }

    static std::int64_t count(const std::string& sql)
    {
        baton::db::Connection connection(*conninfo_);
        return connection.execScript(sql).int64(0, 0);
    }

    static TempDir* base_;
    static PostgresServer* pg_;
    static std::string* conninfo_;
    static SlurmCluster* slurm_;
    static std::string* plugstack_;
    static int ports_[2];

    // Submits a chain of 1-minute jobs as `nobody` that trains for `iterations` x 50 ms.
    static HttpReply submitChain(
        int port, const std::string& name, int iterations, const std::optional<std::string>& policy = std::nullopt)
    {
        const fs::path work = base_->path() / "work";
        const std::string script = "#!/bin/bash\nexec " + std::string(CKPT_CHAIN_JOB_PATH)
            + " --total-iterations=" + std::to_string(iterations) + "\n";
        Json submit { { "name", name }, { "script", script }, { "workdir", work.string() },
            { "sbatch_args",
                { "--time=1", "--ntasks=1", "--cpus-per-task=1",
                    "--output=" + (work / "job-%j.out").string() } } };
        if (policy)
            submit["policy"] = *policy;
        return signedRequest(port, "POST", "/v1/chains", submit.dump(), nobody);
    }
    static bool chainFinished(const std::string& name)
    {
        static constexpr baton::db::Statement finished { "test_chain_finished",
            "SELECT count(*) FROM chains WHERE name = $1 AND state = 'finished'", true };
        baton::db::Connection connection(*conninfo_);
        return connection.exec(finished, baton::db::Params(name)).int64(0, 0) == 1;
    }
    static void expectEventsAuthenticated(int port, const Batond& batond);
    static void expectBadEventsRefused(int port, const Batond& batond);
    static void expectChainsOfOthersHidden(int port);
    static void expectSlowClientsHoldNoWorker(int port);
    static void expectValidMetrics(int port);
    static int killInstancesUntilFinished(Batond& first, Batond& second);
    // Every successor submitted before its predecessor ended, and handovers that resumed.
    static void expectHandoversResumed(const HttpReply& detail, const fs::path& work);
    static void expectOperatorView(int port);

    // No idempotency key was submitted twice.
    static void expectNoDuplicateSubmission()
    {
        const auto queue = run({ "squeue", "-h", "-t", "all", "-o", "%i %k" }, 60s);
        std::map<std::string, int> perKey;
        std::istringstream lines(queue.output);
        for (std::string id, key; lines >> id >> key;) {
            if (key.rfind("baton:", 0) == 0)
                ++perKey[key];
        }
        for (const auto& [key, jobsWithKey] : perKey)
            EXPECT_EQ(jobsWithKey, 1) << key << "\n" << queue.output;
        // Every job with a key is a submission batond recorded (a withdrawn successor stays recorded).
        EXPECT_EQ(count("SELECT count(*) FROM submissions WHERE slurm_job_id IS NOT NULL"),
            static_cast<std::int64_t>(perKey.size()));
    }
};

std::string* BatondService::plugstack_ = nullptr;

TempDir* BatondService::base_ = nullptr;
PostgresServer* BatondService::pg_ = nullptr;
std::string* BatondService::conninfo_ = nullptr;
SlurmCluster* BatondService::slurm_ = nullptr;
int BatondService::ports_[2] = { 0, 0 };

// Events need a MUNGE credential of root or SlurmUser made for that very request, used once: one
// event is accepted, and a duplicate of it with a fresh credential is stored once.
void BatondService::expectEventsAuthenticated(int port, const Batond& batond)
{
    const Json event { { "version", 2 }, { "kind", "step_start" },
        { "idempotency_key", "1.0.n.batch.step_start" }, { "job_id", 1 }, { "chain", "x" } };
    const std::string body = event.dump();
    EXPECT_EQ(send(port, "POST", "/v1/events", body, std::nullopt).status, 401) << batond.log();
    EXPECT_EQ(send(port, "POST", "/v1/events", body, "MUNGE not-a-credential").status, 401);
    // Not root nor SlurmUser: a user cannot report events about anybody's jobs.
    EXPECT_EQ(signedRequest(port, "POST", "/v1/events", body, nobody).status, 403);
    // A credential made for another request.
    const std::string other
        = "MUNGE " + credentialAs(0, baton::munge::requestPayload("POST", "/v1/events", "{}"));
    EXPECT_EQ(send(port, "POST", "/v1/events", body, other).status, 401);
    // A replayed credential.
    const std::string once
        = "MUNGE " + credentialAs(0, baton::munge::requestPayload("POST", "/v1/events", body));
    EXPECT_EQ(send(port, "POST", "/v1/events", body, once).status, 202);
    const HttpReply replayed = send(port, "POST", "/v1/events", body, once);
    EXPECT_EQ(replayed.status, 401);
    EXPECT_NE(replayed.body.find("Replayed"), std::string::npos) << replayed.body;
    // A duplicate with a fresh credential is accepted once, stored once.
    EXPECT_EQ(signedRequest(port, "POST", "/v1/events", body, 0).json().value("duplicate", false), true);
}

void BatondService::expectBadEventsRefused(int port, const Batond& batond)
{
    // Malformed, NUL, invalid UTF-8, too deep (40 KB, under the 64 KiB body limit): 400, nothing stored.
    std::string deep(20000, '[');
    deep += std::string(20000, ']');
    const std::vector<std::pair<std::string, int>> bad {
        { "{\"version\": 2, ", 400 },
        { std::string("{\"version\":2,\"kind\":\"a\0b\"}", 27), 400 },
        { "{\"version\":2,\"kind\":\"a\\u0000\",\"idempotency_key\":\"k\",\"job_id\":1,\"chain\":\"c\"}",
            400 },
        { "{\"version\":2,\"kind\":\"\xff\xfe\",\"idempotency_key\":\"k2\",\"job_id\":1,\"chain\":\"c\"}",
            400 },
        { "{\"version\":2,\"kind\":\"k\",\"idempotency_key\":\"k3\",\"job_id\":1,\"chain\":\"c\",\"tuning\":"
                + deep + "}",
            400 },
        { "{\"version\":2,\"kind\":\"k\",\"idempotency_key\":\"k4\",\"job_id\":1,\"chain\":\"c\",\"tuning\":"
                + std::string(40, '[') + std::string(40, ']') + "}",
            400 },
        { "{\"version\":9,\"kind\":\"k\",\"idempotency_key\":\"k5\",\"job_id\":1,\"chain\":\"c\"}", 400 },
        { "{\"version\":2,\"kind\":\"k\",\"idempotency_key\":\"k6\",\"job_id\":-4,\"chain\":\"c\"}", 400 },
    };
    for (const auto& [text, status] : bad) {
        const HttpReply reply = signedRequest(port, "POST", "/v1/events", text, 0);
        EXPECT_EQ(reply.status, status) << text.substr(0, 80) << " -> " << reply.body << batond.log();
        if (status == 400) {
            EXPECT_TRUE(reply.json().contains("error")) << reply.body;
        }
    }
    // Over the body limit: refused with 413 before the body is read (nothing stored), and the reply still
    // reaches a client that goes on sending the body it announced.
    {
        const std::string oversized = "{\"version\":2,\"kind\":\"k\",\"idempotency_key\":\"k7\",\"job_id\":1,"
                                      "\"chain\":\"c\",\"pad\":\""
            + std::string(100 * 1024, 'x') + "\"}";
        const HttpReply reply = signedRequest(port, "POST", "/v1/events", oversized, 0);
        EXPECT_EQ(reply.status, 413) << reply.body;
    }
}

// More clients than batond has HTTP workers (8) trickle a request a byte at a time, each byte well within
// any per-read timeout: a signed request is still answered at once, and batond closes each of them when
// the whole-request deadline (10 s) passes, however often they send.
void BatondService::expectSlowClientsHoldNoWorker(int port)
{
    std::vector<int> slow;
    for (int i = 0; i < 12; ++i) {
        const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in address {};
        address.sin_family = AF_INET;
        address.sin_port = htons(static_cast<std::uint16_t>(port));
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
        const std::string start = "POST /v1/events HTTP/1.1\r\nHost: batond\r\n";
        ASSERT_EQ(::send(fd, start.data(), start.size(), MSG_NOSIGNAL), static_cast<ssize_t>(start.size()));
        slow.push_back(fd);
    }
    const auto started = std::chrono::steady_clock::now();
    const HttpReply answered = [&] {
        // A 5 s read timeout: an answer that waited for a worker to come free would miss it.
        const std::string target = "/v1/chains";
        return send(port, "GET", target, "",
            "MUNGE " + credentialAs(nobody, baton::munge::requestPayload("GET", target, "")), 5);
    }();
    EXPECT_EQ(answered.status, 200) << answered.body;

    std::vector<bool> closed(slow.size(), false);
    while (std::chrono::steady_clock::now() - started < 16s) {
        bool all = true;
        for (std::size_t i = 0; i < slow.size(); ++i) {
            if (!closed[i]) {
                char byte;
                const ssize_t got = recv(slow[i], &byte, 1, MSG_DONTWAIT);
                closed[i] = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                    || ::send(slow[i], "X", 1, MSG_NOSIGNAL) != 1;
            }
            all = all && closed[i];
        }
        if (all)
            break;
        std::this_thread::sleep_for(500ms);
    }
    const auto held = std::chrono::steady_clock::now() - started;
    for (std::size_t i = 0; i < slow.size(); ++i) {
        EXPECT_TRUE(closed[i]) << "a trickling client was still connected after "
                               << std::chrono::duration_cast<std::chrono::seconds>(held).count() << " s";
        close(slow[i]);
    }
}

// A chain of root's is invisible to another user, who can neither read nor change it.
void BatondService::expectChainsOfOthersHidden(int port)
{
    {
        baton::db::Connection connection(*conninfo_);
        connection.execScript(
            "INSERT INTO chains (owner_uid, owner_name, name) VALUES (0, 'root', 'private')");
    }
    EXPECT_EQ(signedRequest(port, "GET", "/v1/chains/root/private", "", nobody).status, 404);
    EXPECT_EQ(
        signedRequest(port, "POST", "/v1/chains/root/private/policy", R"({"policy": "reactive"})", nobody).status,
        404);
    for (const char* action : { "pause", "cancel", "resubmit", "preempt" })
        EXPECT_EQ(
            signedRequest(port, "POST", std::string("/v1/chains/root/private/") + action, "", nobody).status,
            404);
    EXPECT_TRUE(signedRequest(port, "GET", "/v1/chains", "", nobody).json()["chains"].empty());
    const auto missing = run({ "runuser", "-u", "nobody", "--", BATONCTL_PATH, "show", "root/private",
                                 "--server", "http://127.0.0.1:" + std::to_string(port) },
        60s);
    EXPECT_EQ(missing.exitCode, 3) << missing.output; // batonctl's exit code for "not found"
    const auto paused = run({ "runuser", "-u", "nobody", "--", BATONCTL_PATH, "pause", "root/private",
                                "--server", "http://127.0.0.1:" + std::to_string(port) },
        60s);
    EXPECT_EQ(paused.exitCode, 3) << paused.output;
    EXPECT_EQ(count("SELECT count(*) FROM chains WHERE name = 'private' AND state = 'running'"), 1);
    EXPECT_EQ(count("SELECT count(*) FROM chains WHERE name = 'private' AND policy IS NULL"), 1);
    // Its owner can.
    const HttpReply own = signedRequest(port, "GET", "/v1/chains/root/private", "", 0);
    EXPECT_EQ(own.status, 200) << own.body;
    // Choose its policy: one that batond runs, or null for the service's; anything else is refused.
    const HttpReply chosen
        = signedRequest(port, "POST", "/v1/chains/root/private/policy", R"({"policy": "reactive"})", 0);
    ASSERT_EQ(chosen.status, 200) << chosen.body;
    EXPECT_EQ(chosen.json()["chain"]["policy"], "reactive") << chosen.body;
    EXPECT_EQ(chosen.json()["chain"]["policy_from"], "chain") << chosen.body;
    for (const char* refused : { R"({"policy": "oracle"})", R"({"policy": 3})", R"({})", R"([])" })
        EXPECT_EQ(signedRequest(port, "POST", "/v1/chains/root/private/policy", refused, 0).status, 400) << refused;
    EXPECT_EQ(count("SELECT count(*) FROM chains WHERE name = 'private' AND policy = 'reactive'"), 1);
    const HttpReply reset = signedRequest(port, "POST", "/v1/chains/root/private/policy", R"({"policy": null})", 0);
    ASSERT_EQ(reset.status, 200) << reset.body;
    EXPECT_EQ(reset.json()["chain"]["policy_from"], "service") << reset.body;
    EXPECT_EQ(count("SELECT count(*) FROM decisions d JOIN chains c ON c.id = d.chain_id"
                    " WHERE c.name = 'private' AND d.action = 'policy'"),
        2);
    EXPECT_EQ(signedRequest(port, "POST", "/v1/chains/root/private/pause", "", 0).status, 200);
    EXPECT_EQ(signedRequest(port, "POST", "/v1/chains/root/private/pause", "", 0).status, 409);
    EXPECT_EQ(signedRequest(port, "POST", "/v1/chains/root/private/cancel", "", 0).status, 200);
}

// /metrics is valid Prometheus text.
void BatondService::expectValidMetrics(int port)
{
    const HttpReply metrics = send(port, "GET", "/metrics", "", std::nullopt);
    ASSERT_EQ(metrics.status, 200);
    const fs::path file = base_->path() / "metrics.txt";
    std::ofstream(file) << metrics.body;
    const auto checked = run({ "bash", "-c", "promtool check metrics < \"$0\"", file.string() }, 60s);
    EXPECT_EQ(checked.exitCode, 0) << checked.output;
    EXPECT_NE(metrics.body.find("baton_events_total{outcome=\"accepted\"} 1"), std::string::npos)
        << metrics.body;
}

// Kills whichever instance is active at random moments and starts it again, 20 times at most, until
// the chain e2e finishes or 6 minutes pass; the number of kills.
int BatondService::killInstancesUntilFinished(Batond& first, Batond& second)
{
    std::mt19937 random(12345);
    Batond* instances[] = { &first, &second };
    int kills = 0;
    const auto finished = [] { return chainFinished("e2e"); };
    const auto deadline = std::chrono::steady_clock::now() + 6min;
    while (!finished() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::uniform_int_distribution<int>(1000, 6000)(random)));
        if (kills >= 20)
            continue;
        Batond* victim = instances[kills % 2];
        victim->stop(SIGKILL);
        ++kills;
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 1500)(random)));
        victim->start();
    }
    return kills;
}

void BatondService::expectHandoversResumed(const HttpReply& detail, const fs::path& work)
{
    const Json doc = detail.json();
    const auto& jobs = doc["jobs"];
    // Every successor was submitted before its predecessor ended, and at least one handover completed
    // with the successor resuming from the handover checkpoint.
    for (std::size_t i = 1; i < jobs.size(); ++i) {
        if (jobs[i]["state"] == "CANCELLED")
            continue; // the pending successor withdrawn when the training finished
        // Times are whole seconds: a handover can end the predecessor in the second its successor was
        // submitted and started.
        EXPECT_LE(jobs[i]["submit_unix"].get<std::int64_t>(), jobs[i - 1]["end_unix"].get<std::int64_t>())
            << detail.body;
        EXPECT_LE(jobs[i]["interruption_s"].get<std::int64_t>(), 0) << detail.body;
    }
    int completed = 0;
    for (const auto& handover : doc["handovers"]) {
        if (handover["completed_unix"].is_null())
            continue;
        ++completed;
        const std::int64_t successor = handover["successor_job_id"];
        std::ifstream out(work / ("job-" + std::to_string(successor) + ".out"));
        const std::string text((std::istreambuf_iterator<char>(out)), {});
        const auto final
            = std::find_if(doc["checkpoints"].begin(), doc["checkpoints"].end(), [&](const Json& c) {
                  return c["job_id"] == handover["predecessor_job_id"] && c["final"] == true;
              });
        ASSERT_NE(final, doc["checkpoints"].end()) << detail.body;
        EXPECT_NE(text.find("restored iteration " + std::to_string((*final)["iteration"].get<std::int64_t>())
                      + " verified"),
            std::string::npos)
            << text;
    }
    EXPECT_GE(completed, 1) << detail.body;
    EXPECT_TRUE(std::any_of(doc["checkpoints"].begin(), doc["checkpoints"].end(),
        [](const Json& c) { return c["training_done"] == true; }));
}

// The operator's view through batonctl (root is an operator).
void BatondService::expectOperatorView(int port)
{
    const auto shown = run(
        { BATONCTL_PATH, "show", "nobody/e2e", "--server", "http://127.0.0.1:" + std::to_string(port) },
        60s);
    EXPECT_EQ(shown.exitCode, 0) << shown.output;
    EXPECT_NE(shown.output.find("finished"), std::string::npos) << shown.output;
    const auto listed = run(
        { BATONCTL_PATH, "chains", "--json", "--server", "http://127.0.0.1:" + std::to_string(port) },
        60s);
    EXPECT_EQ(listed.exitCode, 0) << listed.output;
    EXPECT_NE(listed.output.find("\"e2e\""), std::string::npos) << listed.output;
}

TEST_F(BatondService, RefusesWhatItMustAndChangesNothing)
{
    const int port = freePort();
    Batond batond(batondArgs(port, "security"), base_->path() / "security.log");
    ASSERT_TRUE(waitFor([&] { return send(port, "GET", "/healthz", "", std::nullopt).status == 200; }, 30s))
        << batond.log();
    const std::int64_t eventsBefore = count("SELECT count(*) FROM events");

    expectEventsAuthenticated(port, batond);
    EXPECT_EQ(count("SELECT count(*) FROM events"), eventsBefore + 1);
    expectBadEventsRefused(port, batond);
    EXPECT_EQ(count("SELECT count(*) FROM events"), eventsBefore + 1);
    expectChainsOfOthersHidden(port);
    expectSlowClientsHoldNoWorker(port);
    expectValidMetrics(port);
    // root owns no chain: batond would submit its jobs as root.
    const Json asRoot { { "name", "as-root" }, { "script", "#!/bin/bash\ntrue\n" }, { "workdir", "/tmp" },
        { "sbatch_args", Json::array() } };
    const HttpReply refused = signedRequest(port, "POST", "/v1/chains", asRoot.dump(), 0);
    EXPECT_EQ(refused.status, 403) << refused.body;
    EXPECT_EQ(count("SELECT count(*) FROM chains WHERE owner_uid = 0 AND name = 'as-root'"), 0);
}

// Two requests for one new chain submit one first job; a cancel is carried out by the tick until
// slurmctld shows no job left; an ended chain submitted again continues after its last seq, and the
// tick keeps writing every job row.
TEST_F(BatondService, OneFirstJobPerNameAndAnEndedChainStartsAfterItsLastSeq)
{
    const int port = freePort();
    Batond batond(batondArgs(port, "api"), base_->path() / "api.log");
    ASSERT_TRUE(waitFor([&] { return send(port, "GET", "/readyz", "", std::nullopt).status == 200; }, 60s))
        << batond.log();
    auto one = std::async(std::launch::async, [&] { return submitChain(port, "twice", 100000); });
    auto two = std::async(std::launch::async, [&] { return submitChain(port, "twice", 100000); });
    std::vector<int> statuses { one.get().status, two.get().status };
    std::sort(statuses.begin(), statuses.end());
    EXPECT_EQ(statuses, (std::vector<int> { 201, 409 })) << batond.log();
    EXPECT_EQ(
        count("SELECT count(*) FROM submissions s JOIN chains c ON c.id = s.chain_id WHERE c.name = 'twice'"),
        1);

    const auto liveJobs = [] {
        const auto queue = run({ "squeue", "-h", "-u", "nobody", "-t", "PENDING,RUNNING", "-o", "%k" }, 60s);
        return std::count(queue.output.begin(), queue.output.end(), '\n');
    };
    ASSERT_TRUE(waitFor([&] { return liveJobs() == 1; }, 60s));
    EXPECT_EQ(signedRequest(port, "POST", "/v1/chains/nobody/twice/cancel", "", nobody).status, 200);
    EXPECT_TRUE(waitFor([&] { return liveJobs() == 0; }, 60s)) << batond.log();
    EXPECT_TRUE(waitFor(
        [&] { return count("SELECT count(*) FROM chains WHERE name = 'twice' AND withdraw_jobs") == 0; },
        60s));

    // Submitted again by name: seq 1 (its job 0 holds seq 0), and its row is written like any other; the
    // request's policy is the chain's from now on.
    EXPECT_EQ(submitChain(port, "twice", 100000, "oracle").status, 400);
    const HttpReply again = submitChain(port, "twice", 100000, "avg");
    ASSERT_EQ(again.status, 201) << again.body << batond.log();
    EXPECT_EQ(again.json()["chain"]["seq"], 1) << again.body;
    EXPECT_EQ(again.json()["chain"]["policy"], "avg") << again.body;
    EXPECT_TRUE(waitFor(
        [&] {
            return count("SELECT count(*) FROM jobs j JOIN chains c ON c.id = j.chain_id"
                         " WHERE c.name = 'twice' AND j.seq = 1")
                == 1;
        },
        60s))
        << batond.log();
    // An action's reply shows the chain as GET does, with the job it acted on.
    const HttpReply cancelled = signedRequest(port, "POST", "/v1/chains/nobody/twice/cancel", "", nobody);
    EXPECT_EQ(cancelled.status, 200);
    EXPECT_EQ(cancelled.json()["chain"]["state"], "cancelled") << cancelled.body;
    EXPECT_TRUE(cancelled.json()["chain"]["current_job"].is_number_integer()) << cancelled.body;
    EXPECT_TRUE(waitFor([&] { return liveJobs() == 0; }, 60s)) << batond.log();

    // Names outside the one rule of plugin and service.
    for (const std::string& name : { std::string("-dash"), std::string(".hidden"), std::string(129, 'a') })
        EXPECT_EQ(submitChain(port, name, 10).status, 400) << name;
    // Members of another type than the contract's: 400 with the reason, not a server error.
    for (const char* body : { R"({"name": 5, "script": "#!/bin/sh", "workdir": "/tmp"})",
             R"({"name": "typed", "script": ["#!/bin/sh"], "workdir": "/tmp"})" }) {
        const HttpReply typed = signedRequest(port, "POST", "/v1/chains", body, nobody);
        EXPECT_EQ(typed.status, 400) << body << " -> " << typed.body;
        EXPECT_TRUE(typed.json().contains("error")) << typed.body;
    }
    const HttpReply metrics = send(port, "GET", "/metrics", "", std::nullopt);
    EXPECT_NE(metrics.body.find("baton_chain_errors_total{reason=\"job_row\"} 0"), std::string::npos)
        << metrics.body;
    expectNoDuplicateSubmission();
}

// The chain: 1-minute jobs of a program that needs about 100 s of training, submitted as `nobody`.
TEST_F(BatondService, ChainCompletesThroughHandoversWhileTheActiveInstanceIsKilled)
{
    const fs::path work = base_->path() / "work";
    Batond first(batondArgs(ports_[0], "first"), base_->path() / "first.log");
    Batond second(batondArgs(ports_[1], "second"), base_->path() / "second.log");
    ASSERT_TRUE(
        waitFor([&] { return send(ports_[0], "GET", "/readyz", "", std::nullopt).status == 200; }, 60s))
        << first.log();

    const HttpReply created = submitChain(ports_[0], "e2e", 2000);
    ASSERT_EQ(created.status, 201) << created.body << first.log();
    EXPECT_EQ(created.json()["chain"]["owner_uid"], nobody);

    const int kills = killInstancesUntilFinished(first, second);
    const HttpReply detail = signedRequest(ports_[1], "GET", "/v1/chains/nobody/e2e", "", nobody);
    ASSERT_TRUE(chainFinished("e2e")) << detail.body << "\n--- first\n"
                            << first.log() << "\n--- second\n"
                            << second.log();
    EXPECT_EQ(kills, 20);
    const Json doc = detail.json();
    const auto& jobs = doc["jobs"];
    ASSERT_GE(jobs.size(), 3u) << detail.body;

    // No duplicate submission: one Slurm job per idempotency key, and every job of the chain is ours.
    expectNoDuplicateSubmission();

    ASSERT_NO_FATAL_FAILURE(expectHandoversResumed(detail, work));
    expectOperatorView(ports_[1]);
}

// The database restarted and slurmctld stopped for 30 s in the middle of a chain: batond logs, retries
// with backoff, reports it in /readyz, recovers, and the chain finishes without a duplicate.
TEST_F(BatondService, ChainSurvivesDatabaseRestartAndSlurmctldOutage)
{
    const int port = ports_[0]; // where the plugin reports
    Batond batond(batondArgs(port, "outage"), base_->path() / "outage.log");
    const auto readyz = [&] { return send(port, "GET", "/readyz", "", std::nullopt); };
    ASSERT_TRUE(waitFor([&] { return readyz().status == 200; }, 60s)) << batond.log();
    const HttpReply created = submitChain(port, "outage", 1600);
    ASSERT_EQ(created.status, 201) << created.body << batond.log();
    std::this_thread::sleep_for(10s);

    const std::string pgScript = (baton::test::sourceRoot() / "deploy/local/pg.sh").string();
    ASSERT_EQ(run({ "bash", pgScript, "stop", pg_->dir().string() }, 90s).exitCode, 0);
    EXPECT_TRUE(waitFor([&] { return readyz().body.find("database unreachable") != std::string::npos; }, 30s))
        << readyz().body;
    EXPECT_EQ(readyz().status, 503);
    std::this_thread::sleep_for(5s);
    ASSERT_EQ(run({ "bash", pgScript, "start", pg_->dir().string() }, 90s).exitCode, 0);
    EXPECT_TRUE(waitFor([&] { return readyz().status == 200; }, 60s)) << readyz().body << batond.log();

    std::ifstream pidFile(slurm_->dir() / "slurmctld.pid");
    pid_t controller = 0;
    pidFile >> controller;
    ASSERT_GT(controller, 0);
    ASSERT_EQ(kill(controller, SIGTERM), 0);
    EXPECT_TRUE(waitFor([&] { return readyz().body.find("slurm unreachable") != std::string::npos; }, 60s))
        << readyz().body;
    std::this_thread::sleep_for(30s);
    const auto restarted = run({ "bash", (baton::test::sourceRoot() / "deploy/local/slurm.sh").string(),
                                   "start", slurm_->dir().string(), *plugstack_ },
        120s);
    ASSERT_EQ(restarted.exitCode, 0) << restarted.output;
    EXPECT_TRUE(waitFor([&] { return readyz().status == 200; }, 90s)) << readyz().body;

    EXPECT_TRUE(waitFor([&] { return chainFinished("outage"); }, 300s))
        << signedRequest(port, "GET", "/v1/chains/nobody/outage", "", nobody).body << batond.log();
    const std::string log = batond.log();
    EXPECT_TRUE(log.find("database: ") != std::string::npos || log.find("leader lock: ") != std::string::npos)
        << log;
    EXPECT_NE(log.find("slurm: "), std::string::npos) << log;
    EXPECT_NE(log.find("retrying in"), std::string::npos) << log;
    expectNoDuplicateSubmission();
}

// A chain begun with plain `sbatch --baton=NAME` by an unprivileged user, no `batonctl submit`: a batch
// script whose `srun` step runs the checkpointing program as 2 tasks. The plugin's step_start events
// (made in slurmstepd's user_init, where it runs with the job user's effective ids) must be signed as
// root for batond to accept them and register the chain from the job; batond then submits every
// successor (the batch script read back from Slurm, its #SBATCH lines included) until the training
// is done.
TEST_F(BatondService, PlainSbatchChainOfAnUnprivilegedUserRunsToTheEnd)
{
    const int port = ports_[0]; // where the plugin reports
    const fs::path work = base_->path() / "work";
    Batond batond(batondArgs(port, "plain"), base_->path() / "plain.log");
    ASSERT_TRUE(waitFor([&] { return send(port, "GET", "/readyz", "", std::nullopt).status == 200; }, 60s))
        << batond.log();

    const fs::path script = work / "plain.sh";
    // The task count is given on the command line only: batond must read it back from slurmctld.
    std::ofstream(script) << "#!/bin/bash\n"
                             "#SBATCH --overcommit\n"
                             "#SBATCH --output="
                          << (work / "plain-%j.out").string()
                          << "\n"
                             "srun --ntasks=2 --overcommit "
                          << CKPT_CHAIN_JOB_PATH << " --total-iterations=2400\n";
    ::chmod(script.c_str(), 0644);
    const auto submitted = run({ "runuser", "-u", "nobody", "--", "sbatch", "--parsable", "--baton=plain",
                                   "--time=1", "--ntasks=2", "--chdir=" + work.string(), script.string() },
        60s);
    ASSERT_EQ(submitted.exitCode, 0) << submitted.output;
    const std::string firstJob = submitted.output.substr(0, submitted.output.find_first_not_of("0123456789"));

    // Registered from the first job's events, owned by the job's user; the detail names the job that
    // runs the chain's seq (`batonctl show` prints it).
    const auto chain = [&] { return signedRequest(port, "GET", "/v1/chains/nobody/plain", "", nobody); };
    ASSERT_TRUE(waitFor([&] { return chain().status == 200; }, 120s))
        << chain().body << "\n" << send(port, "GET", "/metrics", "", std::nullopt).body << batond.log();
    const Json registered = chain().json();
    EXPECT_EQ(registered["chain"]["owner_uid"], nobody);
    EXPECT_TRUE(registered["chain"]["current_job"].is_number_integer()) << registered.dump();
    const auto& args = registered["submits_with"]["sbatch_args"];
    EXPECT_NE(std::find(args.begin(), args.end(), "--ntasks=2"), args.end()) << registered.dump();

    EXPECT_TRUE(waitFor([] { return chainFinished("plain"); }, 360s)) << chain().body << batond.log();
    const Json doc = chain().json();
    const auto& jobs = doc["jobs"];
    ASSERT_GE(jobs.size(), 3u) << doc.dump();
    EXPECT_EQ(std::to_string(jobs[0]["job_id"].get<std::int64_t>()), firstJob) << doc.dump();
    // Every successor is batond's (a key in its comment, once each) and ran the same 2-task step.
    expectNoDuplicateSubmission();
    EXPECT_EQ(count("SELECT count(*) FROM submissions s JOIN chains c ON c.id = s.chain_id"
                    " WHERE c.name = 'plain' AND s.slurm_job_id IS NOT NULL"),
        static_cast<std::int64_t>(jobs.size()) - 1)
        << doc.dump();
    int restored = 0;
    for (std::size_t i = 1; i < jobs.size(); ++i) {
        if (jobs[i]["state"] == "CANCELLED")
            continue; // a pending successor withdrawn when the training finished
        std::ifstream out(work / ("plain-" + std::to_string(jobs[i]["job_id"].get<std::int64_t>()) + ".out"));
        const std::string text((std::istreambuf_iterator<char>(out)), {});
        EXPECT_EQ(text.find("CORRUPT"), std::string::npos) << text;
        // "restored iteration N verified", once per rank (other lines may say "verified" too).
        std::size_t verified = 0;
        std::istringstream lines(text);
        for (std::string line; std::getline(lines, line);) {
            if (line.rfind("restored iteration ", 0) == 0 && line.ends_with(" verified"))
                ++verified;
        }
        EXPECT_EQ(verified, 2u) << "both ranks restore the chain's checkpoint\n" << text;
        restored += verified == 2 ? 1 : 0;
    }
    EXPECT_GE(restored, 1) << doc.dump();
    EXPECT_TRUE(std::any_of(doc["checkpoints"].begin(), doc["checkpoints"].end(), [](const Json& c) {
        return c["training_done"] == true;
    })) << doc.dump();
    // Every plugin event was signed as root: none refused.
    const HttpReply metrics = send(port, "GET", "/metrics", "", std::nullopt);
    const std::string rejected = "baton_events_total{outcome=\"rejected\"} ";
    if (const auto at = metrics.body.find(rejected); at != std::string::npos) {
        EXPECT_EQ(metrics.body.substr(at + rejected.size(), 2), "0\n") << metrics.body;
    }
    EXPECT_EQ(count("SELECT count(*) FROM events WHERE chain_name = 'plain' AND kind = 'step_start'"
                    " AND sender_uid <> 0"),
        0);
}

} // namespace
