// batond's service paths on a private PostgreSQL and the local munged: event ingestion over HTTP with
// MUNGE decode (against the MUNGE round trip alone, measured in the same run), one provisioner tick
// with 1,000 live chains in the database and a 10,000-job queue, and /metrics scrapes afterwards.
// Targets (issue): >= 2,000 events/s on 2 cores; tick p99 < 50 ms; scrape < 20 ms.
#include "bench/support/synthetic_squeue.hpp"
#include "service/http_api.hpp"
#include "service/live_policy.hpp"
#include "service/provisioner.hpp"
#include "service/slurm_cluster.hpp"

#include "common/munge_credential.hpp"
#include "db/migrations.hpp"
#include "slurm/squeue_json.hpp"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

using namespace baton::service;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Runs argv (no shell) and returns its standard output. The output goes through a file, not a pipe:
// pg.sh leaves a server running that would hold a pipe open.
std::string capture(const std::vector<std::string>& args)
{
    char name[] = "/tmp/baton-bench-out-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0)
        throw std::runtime_error("mkstemp");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);
    std::vector<char*> argv;
    for (const auto& arg : args)
        argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    if (spawned == 0)
        waitpid(pid, &status, 0);
    std::string out;
    char buffer[4096];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t got; (got = read(fd, buffer, sizeof buffer)) > 0;)
        out.append(buffer, static_cast<std::size_t>(got));
    close(fd);
    unlink(name);
    if (spawned != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error(args[0] + " " + args[1] + " failed");
    return out;
}

struct Percentiles {
    double p50 = 0, p99 = 0, max = 0;
};

Percentiles percentiles(std::vector<double> ms)
{
    std::sort(ms.begin(), ms.end());
    const auto at
        = [&](double q) { return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * ms.size()))]; };
    return { at(0.5), at(0.99), ms.back() };
}

double msSince(Clock::time_point start)
{
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// CPU time the benchmark's threads (exited ones too) have used, in ms.
double processCpuMs()
{
    timespec t {};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// From the kernel's scheduler statistics of one process (its main thread): the time it has run and the
// time it was ready to run but waited for a core, in ms; zeros where the kernel does not keep them.
struct SchedTimes {
    double ran = 0, waited = 0;
};
SchedTimes schedTimes(long pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
    double ranNs = 0, waitedNs = 0;
    if (!(in >> ranNs >> waitedNs))
        return {};
    return { ranNs / 1e6, waitedNs / 1e6 };
}

// The cluster of the tick benchmark: each queue() parses the same 10,000-job `squeue --json` document
// the way SlurmCluster parses squeue's output, at a clock the benchmark advances; submitted jobs join
// the queue as pending.
class DocumentCluster final : public Cluster {
public:
    DocumentCluster(std::string document, std::int64_t now)
        : document_(std::move(document))
        , now(now)
    { }
    ClusterQueue queue() override
    {
        ClusterQueue snapshot = toClusterQueue(baton::slurm::parseSqueueJson(document_, now));
        snapshot.jobs.insert(snapshot.jobs.end(), submitted_.begin(), submitted_.end());
        return snapshot;
    }
    std::int64_t submit(const SubmitRequest& request) override
    {
        ClusterJob job;
        job.id = ++next_;
        job.userId = request.owner;
        job.state = "PENDING";
        job.comment = request.key;
        job.submitTime = now;
        submitted_.push_back(job);
        return job.id;
    }
    void signal(std::int64_t, const std::string&, SignalScope, std::int64_t) override { }
    // A new round: the document's jobs only, at `at`.
    void restart(std::int64_t at)
    {
        now = at;
        submitted_.clear();
        next_ = 5'000'000;
    }
    void cancel(std::int64_t, std::int64_t) override { }
    std::string batchScript(std::int64_t, std::int64_t) override { return "#!/bin/bash\n"; }

    static constexpr int clusterNodes = 20000;
    const std::string document_;
    std::int64_t now;

private:
    std::vector<ClusterJob> submitted_;
    std::int64_t next_ = 5'000'000;
};

// Submits only at the lead that batond puts under every policy but reactive, so that a known number
// of chains submit in each tick (ten) while the rest wait, as chains spread over a day would.
class LeadOnly final : public baton::sim::Policy {
public:
    std::string name() const override { return "lead-only"; }
    std::size_t firstSubmit(std::span<const baton::sim::DecisionPoint> points) const override
    {
        return points.size();
    }
};

constexpr int chainCount = 1000;
constexpr int rounds = 5, steadyTicks = 60; // 300 steady ticks
// A service that has run for a while: ended chains with their jobs, submissions and checkpoints, which
// a tick must not read.
constexpr int historyChains = 100'000, historyJobsPerChain = 5, historyCheckpointsPerChain = 3;
constexpr std::int64_t leadSeconds = 600, tickSeconds = 60;

// Starts a private PostgreSQL server in `work` with an empty database "bench"; returns its conninfo.
std::string startDatabase(const std::string& pgScript, const fs::path& work)
{
    std::string started = capture({ "bash", pgScript, "start", (work / "pg").string() });
    while (!started.empty() && started.back() == '\n')
        started.pop_back();
    std::string conninfo = started.substr(started.rfind('\n') + 1);
    capture({ "createdb", "--maintenance-db=" + conninfo, "--", "bench" });
    conninfo.replace(conninfo.find("dbname=postgres"), 15, "dbname=bench");
    return conninfo;
}

// The 10,000-job queue. The chains' jobs are the document's first 1,000: running, each 6 s nearer its
// end than the last, so that ten of them reach the lead in each tick of 60 s.
std::string queueDocument(std::int64_t now)
{
    baton::bench::SyntheticQueue shape;
    shape.clusterNodes = DocumentCluster::clusterNodes;
    shape.now = now;
    shape.adjust = [&](int i, nlohmann::json& job) {
        if (i >= chainCount)
            return;
        const std::int64_t limit = 48 * 3600, end = now + leadSeconds + 30 + 6 * i;
        job["job_state"] = "RUNNING";
        job["state_reason"] = "None";
        job["user_id"] = 1000 + i % 50;
        job["time_limit"] = limit / 60;
        job["start_time"] = end - limit;
        job["end_time"] = end;
        job["submit_time"] = end - limit - 600;
    };
    return baton::bench::syntheticSqueueDocument(shape);
}

// The floor: a credential made and checked, no HTTP and no database; in credentials a second.
double mungeFloorRate()
{
    const int floorCount = 2000;
    const auto start = Clock::now();
    for (int i = 0; i < floorCount; ++i)
        baton::munge::decode(baton::munge::encode("POST /v1/events\n{}"));
    return floorCount / (msSince(start) / 1000);
}

// Ingestion: 4 clients posting events to the API at `port`; in events accepted a second. In a cluster
// slurmstepd signs each event on its compute node, so the service's cores only decode: the measured
// run posts credentials signed beforehand (each once: munged refuses replays). The other run
// (signBeforehand false) signs in the clients, on the same 2 cores.
double ingestRate(int port, const std::string& run, bool signBeforehand)
{
    const int clients = 4, perClient = 1500;
    const auto eventOf = [&](int c, int i) {
        std::string body = "{\"version\":2,\"kind\":\"task_exit\",\"idempotency_key\":\"bench." + run + "."
            + std::to_string(c) + "." + std::to_string(i)
            + "\",\"job_id\":1,\"chain\":\"c\",\"checkpoint\":null,\"tuning\":null}";
        std::string credential
            = baton::munge::encode(baton::munge::requestPayload("POST", "/v1/events", body));
        return std::pair { std::move(body), "MUNGE " + credential };
    };
    std::vector<std::vector<std::pair<std::string, std::string>>> presigned(clients);
    for (int c = 0; signBeforehand && c < clients; ++c)
        for (int i = 0; i < perClient; ++i)
            presigned[c].push_back(eventOf(c, i));
    std::atomic<int> accepted { 0 };
    const auto began = Clock::now();
    std::vector<std::thread> senders;
    for (int c = 0; c < clients; ++c) {
        senders.emplace_back([&, c] {
            httplib::Client client("127.0.0.1", port);
            client.set_keep_alive(true);
            client.set_tcp_nodelay(true);
            for (int i = 0; i < perClient; ++i) {
                const auto [body, authorization] = signBeforehand ? presigned[c][i] : eventOf(c, i);
                const auto reply = client.Post("/v1/events",
                    httplib::Headers { { "Authorization", authorization } }, body, "application/json");
                if (reply && reply->status == 202)
                    ++accepted;
            }
        });
    }
    for (auto& sender : senders)
        sender.join();
    return accepted / (msSince(began) / 1000);
}

// The history: ended chains with their rows, in four statements.
void addHistory(baton::db::Connection& connection)
{
    const auto add = [&](const char* name, const char* sql, int perChain) {
        connection.exec(baton::db::Statement { name, sql }, baton::db::Params(perChain));
    };
    add("bench_history_chains",
        "INSERT INTO chains (name, state, owner_uid, owner_name, seq) SELECT 'history-' || g,"
        " (ARRAY['finished', 'failed', 'cancelled'])[1 + g % 3], 1000 + g % 50, 'user', 4"
        " FROM generate_series(1, $1::int) g",
        historyChains);
    add("bench_history_jobs",
        "INSERT INTO jobs (chain_id, slurm_job_id, seq, state, submit_time, start_time, "
        "end_time,"
        " time_limit_s) SELECT c.id, 100000000 + c.id * 10 + r, r, 'COMPLETED', now(), now(), now(), "
        "172800"
        " FROM chains c, generate_series(0, $1::int - 1) r WHERE c.name LIKE 'history-%'",
        historyJobsPerChain);
    add("bench_history_submissions",
        "INSERT INTO submissions (chain_id, seq, idempotency_key, reason, state, slurm_job_id)"
        " SELECT c.id, r, 'history-' || c.id || '-' || r, 'policy', 'submitted', 100000000 + c.id * 10 + "
        "r"
        " FROM chains c, generate_series(1, $1::int - 1) r WHERE c.name LIKE 'history-%'",
        historyJobsPerChain);
    add("bench_history_checkpoints",
        "INSERT INTO checkpoints (chain_id, iteration, path, total_bytes, created_at, manifest, "
        "training_done)"
        " SELECT c.id, r * 1000, '/chains/ckpt', 1 << 30, now() - interval '1 day', '{}',"
        " c.state = 'finished' AND r = $1::int FROM chains c, generate_series(1, $1::int) r"
        " WHERE c.name LIKE 'history-%'",
        historyCheckpointsPerChain);
}

struct TickResults {
    double drainMs = 0, firstTickMs = 0;
    std::int64_t submitted = 0;
    std::vector<double> ticks, parses;
    // Where a slow tick's time goes: the CPU it used (the benchmark's threads and the database
    // server's process for this connection), and how long the tick's thread and that server process
    // were ready to run but waited for a core.
    std::vector<double> tickCpu, tickWaits;
};

// The provisioner's ticks over rounds of 1,000 live chains, each with a running job of the queue.
class TickRun {
public:
    TickRun(baton::db::Connection& connection, ServiceConfig& config, DocumentCluster& cluster,
        Metrics& metrics, std::int64_t now)
        : connection_(connection)
        , tables_(connection)
        , config_(config)
        , cluster_(cluster)
        , metrics_(metrics)
        , now_(now)
    { }

    std::int64_t count(const char* name, const char* sql)
    {
        return connection_.exec(baton::db::Statement { name, sql, true }).int64(0, 0);
    }
    std::int64_t backlog()
    {
        return count("bench_backlog", "SELECT count(*) FROM events WHERE processed_at IS NULL");
    }

    // With ten submissions a tick the chains of one round last about 95 ticks, so the steady ticks come
    // from several rounds (each on an empty database and a fresh provisioner) for a p99 that is not
    // just their maximum.
    TickResults run()
    {
        serverPid_ = count("bench_backend", "SELECT pg_backend_pid()");
        for (int round = 0; round < rounds; ++round)
            runRound(round);
        return std::move(results_);
    }

private:
    void addChains()
    {
        const ClusterQueue queue = cluster_.queue();
        for (int i = 0; i < chainCount; ++i) {
            const ChainRow chain = tables_.chains.create(1000 + i % 50, "user", "chain-" + std::to_string(i),
                "/chains", { { "script", "#!/bin/bash\n" }, { "workdir", "/tmp" } });
            tables_.jobs.upsert(chain.id, 0, *queue.find(1'000'000 + i));
        }
    }

    void runRound(int round)
    {
        if (round > 0)
            connection_.execScript("DELETE FROM chains WHERE name LIKE 'chain-%'");
        cluster_.restart(now_);
        addChains();
        // One provisioner for every tick of a round, as batond keeps it, on the live policy path (the
        // features of the parsed queue for every waiting chain); each tick 60 s after the last.
        Provisioner provisioner(config_, tables_, cluster_, metrics_, ChainPolicies(std::make_shared<LeadOnly>()),
            liveDecisionPoints([] { return DocumentCluster::clusterNodes; }, nullptr));
        // The first round's first ticks work off the events posted above (1,000 a tick); every
        // round's first tick writes a "wait" row for each of its 1,000 chains. Then the steady ticks.
        int tick = 0;
        do {
            cluster_.now = now_ + tick++ * tickSeconds;
            const auto start = Clock::now();
            provisioner.tick();
            if (round == 0) {
                results_.drainMs += msSince(start);
                if (tick == 1)
                    results_.firstTickMs = results_.drainMs;
            }
        } while (backlog() > 0);
        for (int steady = 0; steady < steadyTicks; ++steady) {
            cluster_.now = now_ + tick++ * tickSeconds;
            steadyTick(provisioner);
        }
        results_.submitted += count("bench_submitted",
            "SELECT count(*) FROM submissions s JOIN chains c ON c.id = s.chain_id"
            " WHERE s.state = 'submitted' AND c.name LIKE 'chain-%'");
    }

    void steadyTick(Provisioner& provisioner)
    {
        const double cpuBefore = processCpuMs();
        const SchedTimes serverBefore = schedTimes(serverPid_), mainBefore = schedTimes(getpid());
        auto start = Clock::now();
        provisioner.tick();
        results_.ticks.push_back(msSince(start));
        const SchedTimes serverAfter = schedTimes(serverPid_), mainAfter = schedTimes(getpid());
        results_.tickCpu.push_back(processCpuMs() - cpuBefore + serverAfter.ran - serverBefore.ran);
        results_.tickWaits.push_back(
            mainAfter.waited - mainBefore.waited + serverAfter.waited - serverBefore.waited);
        start = Clock::now();
        cluster_.queue();
        results_.parses.push_back(msSince(start));
    }

    baton::db::Connection& connection_;
    Tables tables_;
    ServiceConfig& config_;
    DocumentCluster& cluster_;
    Metrics& metrics_;
    const std::int64_t now_;
    long serverPid_ = 0;
    TickResults results_;
};

struct ScrapeResults {
    Percentiles latency;
    std::size_t bytes = 0;
};

ScrapeResults scrapeMetrics(int port)
{
    std::vector<double> scrapes;
    httplib::Client scraper("127.0.0.1", port);
    std::size_t bytes = 0;
    for (int i = 0; i < 200; ++i) {
        const auto start = Clock::now();
        const auto reply = scraper.Get("/metrics");
        scrapes.push_back(msSince(start));
        bytes = reply ? reply->body.size() : 0;
    }
    return { percentiles(scrapes), bytes };
}

struct Results {
    double mungeRate = 0, ingestRate = 0, ingestSigningRate = 0;
    std::int64_t events = 0; // posted, for the ticks to work off
    TickResults ticks;
    ScrapeResults scrape;
};

void printResults(const Results& r)
{
    const Percentiles tick = percentiles(r.ticks.ticks), parse = percentiles(r.ticks.parses),
                      cpu = percentiles(r.ticks.tickCpu), waits = percentiles(r.ticks.tickWaits);
    const Percentiles& scrape = r.scrape.latency;
    std::printf("%-52s %12s %12s %10s\n", "measure", "value", "target", "ratio");
    std::printf(
        "%-52s %12.0f %12s %10s\n", "MUNGE encode+decode alone (events/s, baseline)", r.mungeRate, "", "");
    std::printf("%-52s %12.0f %12s %10.2f\n", "events ingested over HTTP, 4 clients (events/s)", r.ingestRate,
        ">= 2000", r.ingestRate / 2000);
    std::printf(
        "%-52s %12.0f %12s\n", "  the same, the clients signing on these cores", r.ingestSigningRate, "");
    std::printf("%-52s %12.2f %12s\n", "  (that) as a fraction of the MUNGE floor",
        r.ingestSigningRate / r.mungeRate, "");
    std::printf("%-52s %12.1f %12s %10.2f\n", "tick (10,000-job squeue doc, 1,000 chains), p50 ms", tick.p50,
        "", tick.p50 / 50);
    std::printf("%-52s %12.1f %12s %10.2f\n", "tick (10,000-job squeue doc, 1,000 chains), p99 ms", tick.p99,
        "< 50", tick.p99 / 50);
    std::printf("%-52s %12.1f\n", "  the slowest tick, ms", tick.max);
    std::printf("%-52s %12zu\n", "  steady ticks measured", r.ticks.ticks.size());
    std::printf("%-52s %12d\n", "  ended chains in the database beside the live ones", historyChains);
    std::printf("%-52s %12.1f %12s %10.2f\n", "  CPU a tick used (with the database's), p50 ms", cpu.p50, "",
        cpu.p50 / tick.p50);
    std::printf("%-52s %12.1f %12s %10.2f\n", "  the same, p99 ms", cpu.p99, "", cpu.p99 / tick.p99);
    std::printf("%-52s %12.1f %12s\n", "  waited for a core (tick thread + database), p50 ms", waits.p50, "");
    std::printf("%-52s %12.1f %12s\n", "  the same, p99 ms", waits.p99, "");
    std::printf("%-52s %12.1f %12s %10.2f\n", "  of which the squeue document read, p50 ms", parse.p50, "",
        parse.p50 / tick.p50);
    std::printf("%-52s %12lld %12s\n", "  successors submitted (10 a tick)",
        static_cast<long long>(r.ticks.submitted), "");
    std::printf(
        "%-52s %12.1f %12s\n", "first tick (1,000 waits written, 1,000 events), ms", r.ticks.firstTickMs, "");
    std::printf("%-52s %12.0f %12s\n", "events worked off by the ticks (events/s)",
        static_cast<double>(r.events) / (r.ticks.drainMs / 1000), "");
    std::printf("%-52s %12.2f %12s %10.2f\n", "/metrics scrape p50 (ms)", scrape.p50, "", scrape.p50 / 20);
    std::printf(
        "%-52s %12.2f %12s %10.2f\n", "/metrics scrape p99 (ms)", scrape.p99, "< 20", scrape.p99 / 20);
    std::printf("%-52s %12zu\n", "/metrics body (bytes)", r.scrape.bytes);
    std::printf("(tick_bench splits the parse, the live queue and the features of a tick)\n");
}

Results measure(const std::string& conninfo)
{
    baton::db::Connection connection(conninfo);
    baton::db::migrate(connection);
    ServiceConfig config;
    config.listenPort = 0;
    config.policy = "avg";
    Metrics metrics;
    ConnectionPool pool(conninfo, static_cast<std::size_t>(config.httpThreads), {});
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    DocumentCluster cluster(queueDocument(now), now);
    HttpApi api(config, pool, cluster, metrics, [] { return Readiness { true, "ready" }; });
    const int port = api.bind();
    std::thread server([&] { api.serve(); });
    // However the measurements end (an exception too), the server stops before the database does.
    struct StopServer {
        HttpApi& api;
        std::thread& thread;
        ~StopServer()
        {
            api.stop();
            if (thread.joinable())
                thread.join();
        }
    } stopServer { api, server };

    Results results;
    results.mungeRate = mungeFloorRate();
    results.ingestRate = ingestRate(port, "signed", true);
    results.ingestSigningRate = ingestRate(port, "signing", false);
    config.submitLead = std::chrono::seconds(leadSeconds);
    TickRun ticks(connection, config, cluster, metrics, now);
    results.events = ticks.backlog();
    addHistory(connection);
    connection.execScript("VACUUM ANALYZE");
    results.ticks = ticks.run();
    results.scrape = scrapeMetrics(port);
    return results;
}

} // namespace

int main()
{
    const fs::path root = BATON_SOURCE_ROOT;
    char pattern[] = "/tmp/baton-service-bench-XXXXXX";
    const fs::path work = mkdtemp(pattern);
    fs::permissions(work,
        fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read
            | fs::perms::others_exec);
    const std::string pgScript = (root / "deploy/local/pg.sh").string();
    const std::string conninfo = startDatabase(pgScript, work);
    int rc = 0;
    try {
        printResults(measure(conninfo));
    } catch (const std::exception& error) {
        std::fprintf(stderr, "service_bench: %s\n", error.what());
        rc = 1;
    }
    capture({ "bash", pgScript, "stop", (work / "pg").string() });
    fs::remove_all(work);
    return rc;
}
