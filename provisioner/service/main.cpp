// batond: the provisioning service. One process serves the HTTP API (any instance accepts events and
// requests) and runs the policy loop while it holds the leader lock (exactly one instance acts).
#include "baton_version.h"
#include "config.hpp"
#include "connection_pool.hpp"
#include "http_api.hpp"
#include "leader.hpp"
#include "live_policy.hpp"
#include "log.hpp"
#include "metrics.hpp"
#include "provisioner.hpp"
#include "slurm_cluster.hpp"

#include "cli/command_line.hpp"
#include "db/errors.hpp"
#include "db/migrations.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <iostream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace {

using namespace baton::service;
using SteadyClock = std::chrono::steady_clock;

std::atomic<bool> stopRequested { false };
constexpr baton::db::Statement pingStatement { "readiness_ping", "SELECT 1", true };

extern "C" void onStopSignal(int)
{
    stopRequested = true;
}

std::string numberText(double seconds)
{
    std::ostringstream out;
    out << seconds;
    return out.str();
}

// batond's command line. Every option but --config, --check-config and --version is also a key of the
// JSON file, with underscores (--listen-port is listen_port): config.cpp validates both the same way.
baton::ctl::CommandSpec commandSpec()
{
    const ServiceConfig d;
    const auto seconds
        = [](auto duration) { return numberText(std::chrono::duration<double>(duration).count()); };
    baton::ctl::CommandSpec spec("batond", "The baton provisioning service: HTTP API, policy loop, metrics.");
    spec.option("config", "FILE", "read the settings from this JSON file; options after it override it")
        .flag("check-config", "validate the settings and exit")
        .flag("version", "print the version and exit")
        // The HTTP API.
        .option("listen-address", "ADDR", "address of the HTTP API and /metrics", d.listenAddress)
        .option(
            "listen-port", "PORT", "port of the HTTP API (0: any free port)", std::to_string(d.listenPort))
        .option("http-threads", "N", "threads (and database connections) of the HTTP API",
            std::to_string(d.httpThreads))
        .option("max-body-bytes", "N", "largest request body", std::to_string(d.maxBodyBytes))
        .option("max-json-depth", "N", "deepest nesting of a request's JSON", std::to_string(d.maxJsonDepth))
        .option("max-live-chains-per-user", "N", "POST /v1/chains refuses more (429); 0: no limit",
            std::to_string(d.maxLiveChainsPerUser))
        .option("metrics-token", "TOKEN", "bearer token required by /metrics, /healthz and /readyz")
        // Who may do what.
        .option("operators-group", "GROUP", "unix group whose members may act on every chain")
        .option("slurm-users", "USER,...", "who may send plugin events besides uid 0", "root")
        .option("munge-socket", "PATH", "munged's socket; default: munge's own")
        // State and logs.
        .option("database", "CONNINFO", "PostgreSQL connection string; default: the PG* environment")
        .option("retention-days", "D", "delete processed events and decisions older than this; 0: keep",
            std::to_string(d.retentionDays))
        .option("instance-name", "NAME", "this instance in logs and /readyz; default: host name and pid")
        .option("log-level", "LEVEL", "error, warning, info or debug", "info")
        // The policy loop.
        .option("tick-seconds", "S", "period of the policy loop", seconds(d.tick))
        .option(
            "policy", "NAME", "when to submit successors: reactive, avg, predict, checkpoint-aware", d.policy)
        .option("model", "NAME", "the `models` row the learned policies load", d.modelName)
        .option(
            "quantile", "Q", "q of the learned policies when the model stores none", numberText(d.quantile))
        .option("cluster-nodes", "N", "nodes the policy features assume; default: from the queue")
        .option("submit-lead-seconds", "S",
            "submit successors at least this long before the predecessor's limit\n"
            "(at most half of that limit)",
            seconds(d.submitLead))
        .option("successors-in-flight", "N",
            "successors a chain keeps queued at once: 1, or 2 to queue the job after a\n"
            "waiting successor too (for queues that wait longer than a job's limit)",
            std::to_string(d.successorsInFlight))
        .option("retry-budget", "N", "resubmissions of a job that failed without progress",
            std::to_string(d.retryBudget))
        .option("handover-timeout-seconds", "S", "cancel a signalled predecessor still running after this",
            seconds(d.handoverTimeout))
        // Slurm.
        .option("sbatch", "PROGRAM", "Slurm's sbatch", d.sbatch)
        .option("squeue", "PROGRAM", "Slurm's squeue", d.squeue)
        .option("scancel", "PROGRAM", "Slurm's scancel", d.scancel)
        .option("scontrol", "PROGRAM", "Slurm's scontrol", d.scontrol)
        .option("slurm-timeout-seconds", "S", "limit of every squeue, sbatch and scancel call",
            seconds(d.slurmTimeout))
        .option("submit-grace-seconds", "S",
            "retry a submission not visible in squeue after this; must exceed\n"
            "--slurm-timeout-seconds by more than 5 s",
            seconds(d.submitGrace))
        .note("Every option but --config, --check-config and --version is also a key of the JSON file\n"
              "(--listen-port is listen_port; on the command line an underscore may stand for a dash).\n"
              "Options override the file when they come after --config.\n"
              "Exit status: 0 stopped by SIGTERM or SIGINT, 1 failed, 2 bad settings.");
    return spec;
}

// An option's underscores as dashes (--listen_port is --listen-port), the value untouched.
std::vector<std::string> dashedOptions(std::vector<std::string> args)
{
    for (auto& arg : args) {
        if (arg.rfind("--", 0) != 0)
            continue;
        const auto end = std::min(arg.find('='), arg.size());
        std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(end), '_', '-');
    }
    return args;
}

// The schema must be what this program expects; migrating is the operator's step (`batonctl db
// migrate`), never a side effect of starting a service.
bool schemaIsCurrent(const ServiceConfig& config)
{
    baton::db::Connection connection(config.database);
    const auto status = baton::db::schemaStatus(connection);
    if (status.pending.empty() && status.current == status.latestKnown)
        return true;
    logError("the database schema is at version " + std::to_string(status.current) + ", this batond needs "
        + std::to_string(status.latestKnown) + ": run `batonctl db migrate`");
    return false;
}

// Sleeps until `deadline` or a stop signal; the handler only sets a flag, so sleep in short slices.
void sleepUntil(SteadyClock::time_point deadline)
{
    while (!stopRequested && SteadyClock::now() < deadline)
        std::this_thread::sleep_for(
            std::min<SteadyClock::duration>(deadline - SteadyClock::now(), std::chrono::milliseconds(200)));
}

// Readiness is measured apart from the loop, so that a tick blocked on a dead service cannot hide the
// outage: the database is asked on every probe, Slurm counts as reachable while the last successful
// call is recent and no call has failed since.
class ReadinessProbe {
public:
    ReadinessProbe(const ServiceConfig& config, ConnectionPool& pool, Metrics& metrics)
        : config_(config)
        , pool_(pool)
        , metrics_(metrics)
        , slurmStale_(3 * config.tick + config.slurmTimeout)
    { }

    void markSlurm(bool ok)
    {
        slurmFailing_ = !ok;
        if (ok)
            slurmAnsweredAt_ = SteadyClock::now().time_since_epoch().count();
    }
    void setLeading(bool leading) { leading_ = leading; }

    Readiness check()
    {
        bool databaseOk = false;
        try {
            auto lease = pool_.borrow();
            databaseOk = (*lease).exec(pingStatement).int64(0, 0) == 1;
        } catch (const std::exception&) {
            databaseOk = false;
        }
        const auto answered = SteadyClock::time_point(SteadyClock::duration(slurmAnsweredAt_.load()));
        const bool slurmOk = !slurmFailing_ && SteadyClock::now() - answered < slurmStale_;
        Readiness r;
        r.ready = databaseOk && slurmOk;
        r.detail = std::string(r.ready ? "ready" : "not ready") + ": database "
            + (databaseOk ? "ok" : "unreachable") + ", slurm " + (slurmOk ? "ok" : "unreachable") + ", "
            + (leading_ ? "active" : "standby") + " (" + config_.instanceName + ")";
        metrics_.ready().Set(r.ready ? 1 : 0);
        return r;
    }

private:
    const ServiceConfig& config_;
    ConnectionPool& pool_;
    Metrics& metrics_;
    const SteadyClock::duration slurmStale_;
    std::atomic<bool> leading_ { false }, slurmFailing_ { true };
    std::atomic<SteadyClock::rep> slurmAnsweredAt_ { 0 };
};

// The policy loop: one tick per period while this instance leads, with a growing backoff after a
// database or Slurm failure.
class PolicyLoop {
public:
    PolicyLoop(const ServiceConfig& config, SlurmCluster& cluster, Metrics& metrics, ReadinessProbe& probe)
        : config_(config)
        , cluster_(cluster)
        , metrics_(metrics)
        , probe_(probe)
        , leader_(config.database)
    {
        // Short reconnection inside a call: the loop's own backoff retries, and says so in the log.
        loopOptions_.reconnectFor = std::chrono::milliseconds(2'000);
        loopOptions_.connectTimeout = std::chrono::seconds(5);
    }

    void runUntilStopped()
    {
        while (!stopRequested) {
            const auto started = SteadyClock::now();
            auto next = started + config_.tick;
            const bool leading = leader_.check();
            probe_.setLeading(leading);
            metrics_.leader().Set(leading ? 1 : 0);
            if (const auto retryIn = tickOnce(leading))
                next = std::min(next, started + *retryIn);
            sleepUntil(next);
        }
    }

private:
    // After a failure, how soon to try again (the backoff, doubled for the next failure up to a tick).
    std::optional<std::chrono::milliseconds> tickOnce(bool leading)
    {
        const auto failed = [&](const std::string& what) {
            logError(what + "; retrying in " + std::to_string(backoff_.count()) + " ms");
            const auto retryIn = backoff_;
            backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(config_.tick));
            return std::optional(retryIn);
        };
        try {
            if (!connection_)
                connection_ = std::make_unique<baton::db::Connection>(config_.database, loopOptions_);
            if (leading) {
                lead();
            } else {
                provisioner_.reset(); // a leader again later starts from what the database says
                probe_.markSlurm(cluster_.reachable());
                connection_->ensureSession();
            }
            backoff_ = std::chrono::milliseconds(500);
        } catch (const baton::db::DbError& error) {
            metrics_.dbErrors().Increment();
            provisioner_.reset();
            tables_.reset();
            connection_.reset();
            return failed(std::string("database: ") + error.what());
        } catch (const SlurmError& error) {
            probe_.markSlurm(false);
            return failed(std::string("slurm: ") + error.what());
        } catch (const std::exception& error) {
            logError(std::string("tick: ") + error.what());
        }
        return std::nullopt;
    }

    void lead()
    {
        if (!policy_)
            policy_ = makeLivePolicies(config_, *connection_);
        if (!provisioner_) {
            tables_ = std::make_unique<Tables>(*connection_);
            provisioner_
                = std::make_unique<Provisioner>(config_, *tables_, cluster_, metrics_, policy_->policies,
                    liveDecisionPoints([this] { return cluster_.usableNodes(); }, policy_->predictor));
            provisioner_->setLeadershipCheck([this] { return leader_.check(); });
        }
        provisioner_->tick();
        probe_.markSlurm(true);
    }

    const ServiceConfig& config_;
    SlurmCluster& cluster_;
    Metrics& metrics_;
    ReadinessProbe& probe_;
    LeaderLock leader_;
    baton::db::ConnectionOptions loopOptions_;
    std::unique_ptr<baton::db::Connection> connection_;
    std::optional<LivePolicies> policy_;
    // Kept from tick to tick (it remembers which decisions it wrote), renewed with the connection.
    std::unique_ptr<Tables> tables_;
    std::unique_ptr<Provisioner> provisioner_;
    std::chrono::milliseconds backoff_ { 500 };
};

int run(ServiceConfig config)
{
    setLogLevel(config.logLevel);
    if (config.instanceName.empty()) {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        config.instanceName = std::string(host) + ":" + std::to_string(::getpid());
    }
    if (!schemaIsCurrent(config))
        return 1;
    Metrics metrics;
    baton::db::ConnectionOptions httpOptions;
    httpOptions.callTimeout = std::chrono::milliseconds(10'000);
    httpOptions.statementTimeout = std::chrono::milliseconds(10'000);
    httpOptions.reconnectFor = std::chrono::milliseconds(2'000);
    ConnectionPool pool(config.database, static_cast<std::size_t>(config.httpThreads), httpOptions);
    SlurmCluster cluster(config, metrics);
    ReadinessProbe probe(config, pool, metrics);
    HttpApi api(config, pool, cluster, metrics, [&probe] { return probe.check(); });
    const int port = api.bind();
    std::thread server([&] { api.serve(); });
    logInfo("batond " + config.instanceName + " listening on " + config.listenAddress + ":"
        + std::to_string(port) + ", policy " + config.policy + ", tick " + std::to_string(config.tick.count())
        + " ms");
    PolicyLoop loop(config, cluster, metrics, probe);
    loop.runUntilStopped();
    logInfo("stopping");
    api.stop();
    server.join();
    return 0;
}

// The settings from the command line; exits (with its status) for --help, --version, --check-config.
std::optional<int> parseCommandLine(const std::vector<std::string>& given, ServiceConfig& config)
{
    const auto spec = commandSpec();
    auto args = dashedOptions(given);
    const auto parsed = spec.parse(args);
    if (parsed.helpRequested()) {
        std::cout << spec.help();
        return 0;
    }
    if (parsed.flag("version")) {
        std::cout << "batond " << BATON_VERSION << "\n";
        return 0;
    }
    // The settings apply in command-line order, so that --config and the options around it override
    // each other as written.
    std::erase_if(args, [](const std::string& arg) { return arg == "--check-config" || arg == "--version"; });
    applyFlags(config, args);
    if (parsed.flag("check-config")) {
        std::cout << "batond: configuration is valid\n";
        return 0;
    }
    return std::nullopt;
}

} // namespace

int main(int argc, char** argv)
{
    std::signal(SIGTERM, onStopSignal);
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGPIPE, SIG_IGN);
    ServiceConfig config;
    try {
        if (const auto exitNow = parseCommandLine({ argv + 1, argv + argc }, config))
            return *exitNow;
    } catch (const baton::ctl::UsageError& error) {
        std::cerr << "batond: " << error.what() << "\n(batond --help lists the options)\n";
        return 2;
    } catch (const ConfigError& error) {
        std::cerr << "batond: " << error.what() << "\n(batond --help lists the options)\n";
        return 2;
    }
    try {
        return run(config);
    } catch (const std::exception& error) {
        logError(error.what());
        return 1;
    }
}
