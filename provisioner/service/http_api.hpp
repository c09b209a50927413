// batond's HTTP API (JSON, /v1): events from the plugin, chains for their owners and operators,
// health, readiness and metrics. Every /v1 request is authenticated by its MUNGE credential
// (common/munge_credential.hpp); a body is only ever a hint or a wish, never an identity.
#pragma once

#include "cluster.hpp"
#include "config.hpp"
#include "connection_pool.hpp"
#include "http_server.hpp"
#include "identity.hpp"
#include "metrics.hpp"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace baton::service {

struct Tables;

struct Readiness {
    bool ready = false;
    std::string detail;
};

class HttpApi {
public:
    HttpApi(const ServiceConfig& config, ConnectionPool& pool, Cluster& cluster, Metrics& metrics,
        std::function<Readiness()> readiness);
    ~HttpApi();

    // Binds; returns the port (useful with listen_port 0). Throws std::runtime_error.
    int bind();
    // Serves until stop(); call from its own thread.
    void serve();
    void stop();

private:
    // A /v1 handler, run for an authenticated caller (http_handlers.cpp).
    using Handler = void (HttpApi::*)(const HttpRequest&, HttpResponse&, const Caller&);
    using Served = std::function<void(const HttpRequest&, HttpResponse&)>;

    void routes();
    // Authenticates the request, runs `handler`, and maps failures to status codes with a readable body.
    Served authenticated(Handler handler);
    // The caller of a /v1 request, from its MUNGE credential; throws HttpError (401, 503).
    Caller authenticate(const HttpRequest& request);
    // /metrics, /healthz and /readyz: open, or behind a bearer token when one is configured.
    bool bearerTokenOk(const HttpRequest& request, HttpResponse& response) const;

    void postEvent(const HttpRequest& request, HttpResponse& response, const Caller& caller);
    void listChains(const HttpRequest& request, HttpResponse& response, const Caller& caller);
    void showChain(const HttpRequest& request, HttpResponse& response, const Caller& caller);
    void createChain(const HttpRequest& request, HttpResponse& response, const Caller& caller);
    void actOnChain(const HttpRequest& request, HttpResponse& response, const Caller& caller);
    void refuseOverLiveChainCap(Tables& tables, const Caller& caller) const;
    // POST /v1/chains/{owner}/{name}/policy {"policy": NAME or null}: the chain's own policy, or the service's.
    void setChainPolicy(const HttpRequest& request, HttpResponse& response, const Caller& caller);

    const ServiceConfig& config_;
    ConnectionPool& pool_;
    Cluster& cluster_;
    Metrics& metrics_;
    std::function<Readiness()> readiness_;
    IdentityResolver identities_;
    // Requests that run sbatch (POST /v1/chains), per user: a user may hold at most
    // maxSubmittingPerUser of the HTTP workers at once, so that nobody can take them all.
    static constexpr int maxSubmittingPerUser = 2;
    std::mutex submittingMutex_;
    std::map<std::int64_t, int> submitting_;
    // Last: destroyed first, so that its handlers have finished before anything they use goes.
    HttpServer server_;
};

} // namespace baton::service
