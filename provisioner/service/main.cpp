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

#include <errors.hpp>
#include <migrations.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <iostream>
#include <thread>
#include <unistd.h>

namespace {

using namespace baton::service;

std::atomic<bool> stopRequested { false };
constexpr baton::db::Statement pingStatement { "readiness_ping", "SELECT 1", true };

extern "C" void onStopSignal(int)
{
    stopRequested = true;
}

// Sleeps until `deadline` or a stop signal; the handler only sets a flag, so sleep in short slices.
void sleepUntil(std::chrono::steady_clock::time_point deadline)
{
    while (!stopRequested && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
            deadline - std::chrono::steady_clock::now(), std::chrono::milliseconds(200)));
}

int run(ServiceConfig config)
{
    setLogLevel(config.logLevel);
    if (config.instanceName.empty()) {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        config.instanceName = std::string(host) + ":" + std::to_string(::getpid());
    }
    {
        // The schema must be what this program expects; migrating is the operator's step
        // (`batonctl db migrate`), never a side effect of starting a service.
        baton::db::Connection connection(config.database);
        const auto status = baton::db::schemaStatus(connection);
        if (!status.pending.empty() || status.current != status.latestKnown) {
            logError("the database schema is at version " + std::to_string(status.current)
                + ", this batond needs " + std::to_string(status.latestKnown)
                + ": run `batonctl db migrate`");
            return 1;
        }
    }
    Metrics metrics;
    baton::db::ConnectionOptions httpOptions;
    httpOptions.callTimeout = std::chrono::milliseconds(10'000);
    httpOptions.statementTimeout = std::chrono::milliseconds(10'000);
    httpOptions.reconnectFor = std::chrono::milliseconds(2'000);
    ConnectionPool pool(config.database, static_cast<std::size_t>(config.httpThreads), httpOptions);
    SlurmCluster cluster(config, metrics);

    // Readiness is measured apart from the loop, so that a tick blocked on a dead service cannot
    // hide the outage: the database is asked on every probe, Slurm counts as reachable while the last
    // successful call is recent and no call has failed since.
    using SteadyClock = std::chrono::steady_clock;
    std::atomic<bool> leading { false }, slurmFailing { true };
    std::atomic<SteadyClock::rep> slurmAnsweredAt { 0 };
    const auto slurmStale = 3 * config.tick + config.slurmTimeout;
    const auto markSlurm = [&](bool ok) {
        slurmFailing = !ok;
        if (ok)
            slurmAnsweredAt = SteadyClock::now().time_since_epoch().count();
    };
    const auto readiness = [&] {
        bool databaseOk = false;
        try {
            auto lease = pool.borrow();
            databaseOk = (*lease).exec(pingStatement).int64(0, 0) == 1;
        } catch (const std::exception&) {
            databaseOk = false;
        }
        const auto answered = SteadyClock::time_point(SteadyClock::duration(slurmAnsweredAt.load()));
        const bool slurmOk = !slurmFailing && SteadyClock::now() - answered < slurmStale;
        Readiness r;
        r.ready = databaseOk && slurmOk;
        r.detail = std::string(r.ready ? "ready" : "not ready") + ": database "
            + (databaseOk ? "ok" : "unreachable") + ", slurm " + (slurmOk ? "ok" : "unreachable") + ", "
            + (leading ? "active" : "standby") + " (" + config.instanceName + ")";
        metrics.ready().Set(r.ready ? 1 : 0);
        return r;
    };
    HttpApi api(config, pool, cluster, metrics, readiness);
    const int port = api.bind();
    std::thread server([&] { api.serve(); });
    logInfo("batond " + config.instanceName + " listening on " + config.listenAddress + ":"
        + std::to_string(port) + ", policy " + config.policy + ", tick " + std::to_string(config.tick.count())
        + " ms");

    // Short reconnection inside a call: the loop's own backoff retries, and says so in the log.
    baton::db::ConnectionOptions loopOptions;
    loopOptions.reconnectFor = std::chrono::milliseconds(2'000);
    loopOptions.connectTimeout = std::chrono::seconds(5);
    LeaderLock leader(config.database);
    std::unique_ptr<baton::db::Connection> connection;
    std::optional<LivePolicy> policy;
    // Kept from tick to tick (it remembers which decisions it wrote), renewed with the connection.
    std::unique_ptr<Store> store;
    std::unique_ptr<Provisioner> provisioner;
    auto backoff = std::chrono::milliseconds(500);
    while (!stopRequested) {
        const auto started = std::chrono::steady_clock::now();
        auto next = started + config.tick;
        leading = leader.check();
        metrics.leader().Set(leading ? 1 : 0);
        try {
            if (!connection)
                connection = std::make_unique<baton::db::Connection>(config.database, loopOptions);
            if (leading) {
                if (!policy)
                    policy = makeLivePolicy(config, *connection);
                if (!provisioner) {
                    store = std::make_unique<Store>(*connection);
                    provisioner = std::make_unique<Provisioner>(config, *store, cluster, metrics,
                        policy->policy, liveDecisionPoints([&cluster] { return cluster.usableNodes(); }, policy->predictor));
                    provisioner->setLeadershipCheck([&leader] { return leader.check(); });
                }
                provisioner->tick();
                markSlurm(true);
            } else {
                provisioner.reset(); // a leader again later starts from what the database says
                markSlurm(cluster.reachable());
                connection->ensureSession();
            }
            backoff = std::chrono::milliseconds(500);
        } catch (const baton::db::DbError& error) {
            metrics.dbErrors().Increment();
            provisioner.reset();
            store.reset();
            connection.reset();
            logError(std::string("database: ") + error.what() + "; retrying in "
                + std::to_string(backoff.count()) + " ms");
            next = std::min(next, started + backoff);
            backoff = std::min(backoff * 2, std::chrono::milliseconds(config.tick));
        } catch (const SlurmError& error) {
            markSlurm(false);
            logError(std::string("slurm: ") + error.what() + "; retrying in "
                + std::to_string(backoff.count()) + " ms");
            next = std::min(next, started + backoff);
            backoff = std::min(backoff * 2, std::chrono::milliseconds(config.tick));
        } catch (const std::exception& error) {
            logError(std::string("tick: ") + error.what());
        }
        sleepUntil(next);
    }
    logInfo("stopping");
    api.stop();
    server.join();
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    std::signal(SIGTERM, onStopSignal);
    std::signal(SIGINT, onStopSignal);
    std::signal(SIGPIPE, SIG_IGN);
    ServiceConfig config;
    try {
        std::vector<std::string> args(argv + 1, argv + argc);
        if (!args.empty() && args[0] == "--version") {
            std::cout << "batond " << BATON_VERSION << "\n";
            return 0;
        }
        // --check-config: validate the file and flags, start nothing (for packaging and deploy tests).
        const auto check = std::find(args.begin(), args.end(), "--check-config");
        const bool checkOnly = check != args.end();
        if (checkOnly)
            args.erase(check);
        if (!applyFlags(config, args)) {
            std::cout << flagsHelp() << "  --check-config   validate the settings and exit\n";
            return 0;
        }
        if (checkOnly) {
            std::cout << "batond: configuration is valid\n";
            return 0;
        }
    } catch (const ConfigError& error) {
        std::cerr << "batond: " << error.what() << "\n(batond --help lists the settings)\n";
        return 2;
    }
    try {
        return run(config);
    } catch (const std::exception& error) {
        logError(error.what());
        return 1;
    }
}
