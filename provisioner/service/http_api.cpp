#include "http_api.hpp"

#include "http_reply.hpp"
#include "log.hpp"
#include "event_store.hpp"

#include "db/errors.hpp"

namespace baton::service {

namespace {

using Json = nlohmann::json;

const std::string chainPath(R"(/v1/chains/([A-Za-z0-9._-]{1,64})/([^/]{1,256}))");
const std::string actionPath(
    R"(/v1/chains/([A-Za-z0-9._-]{1,64})/([^/]{1,256})/(resubmit|preempt|pause|resume|cancel))");
const std::string policyPath(R"(/v1/chains/([A-Za-z0-9._-]{1,64})/([^/]{1,256})/policy)");

} // namespace

HttpApi::HttpApi(const ServiceConfig& config, ConnectionPool& pool, Cluster& cluster, Metrics& metrics,
    std::function<Readiness()> readiness)
    : config_(config)
    , pool_(pool)
    , cluster_(cluster)
    , metrics_(metrics)
    , readiness_(std::move(readiness))
    , identities_(config.operatorsGroup, config.slurmUsers)
    , server_(HttpServer::Limits {
          .requestTime = std::chrono::seconds(10),
          .writeTime = std::chrono::seconds(10),
          // The MUNGE credential carries the request's body inside it (base64, 4/3 of it): the headers
          // may be twice the body's limit on top of an ordinary request's 16 KiB.
          .headerBytes = 16 * 1024 + 2 * config.maxBodyBytes,
          .bodyBytes = config.maxBodyBytes,
          .maxConnections = 512,
          .handlerThreads = config.httpThreads,
      })
{
    routes();
}

HttpApi::~HttpApi() = default;

int HttpApi::bind()
{
    return server_.bind(config_.listenAddress, config_.listenPort);
}

void HttpApi::serve()
{
    server_.serve();
}

void HttpApi::stop()
{
    server_.stop();
}

void HttpApi::routes()
{
    server_.route("GET", "/healthz", [this](const HttpRequest& request, HttpResponse& response) {
        if (bearerTokenOk(request, response))
            response.setContent("ok\n", "text/plain");
    });
    server_.route("GET", "/readyz", [this](const HttpRequest& request, HttpResponse& response) {
        if (!bearerTokenOk(request, response))
            return;
        const Readiness readiness = readiness_();
        response.status = readiness.ready ? 200 : 503;
        response.setContent(readiness.detail + "\n", "text/plain");
    });
    server_.route("GET", "/metrics", [this](const HttpRequest& request, HttpResponse& response) {
        if (bearerTokenOk(request, response))
            response.setContent(metrics_.render(), "text/plain; version=0.0.4");
    });

    server_.route("POST", "/v1/events", authenticated(&HttpApi::postEvent));
    server_.route("GET", "/v1/chains", authenticated(&HttpApi::listChains));
    server_.route("GET", chainPath, authenticated(&HttpApi::showChain));
    server_.route("POST", "/v1/chains", authenticated(&HttpApi::createChain));
    server_.route("POST", actionPath, authenticated(&HttpApi::actOnChain));
    server_.route("POST", policyPath, authenticated(&HttpApi::setChainPolicy));

    server_.onError([](HttpResponse& response) {
        const int status = response.status;
        const std::string message = status == 400 ? "malformed request"
            : status == 404                       ? "no such resource"
            : status == 405                       ? "method not allowed"
            : status == 413                       ? "the body is too large"
            : status == 431                       ? "the request's headers are too large"
            : status >= 500                       ? "internal error; the service's log has the details"
                                                  : "request refused";
        reply(response, status, Json { { "error", message } });
    });
}

namespace {

// Compares a secret in time that depends on its length only, not on where the first difference lies, so
// that a client cannot find the token a character at a time by timing the answers.
bool sameSecret(std::string_view given, std::string_view secret)
{
    unsigned char difference = given.size() == secret.size() ? 0 : 1;
    for (std::size_t i = 0; i < secret.size(); ++i)
        difference |= static_cast<unsigned char>(secret[i] ^ (i < given.size() ? given[i] : 0));
    return difference == 0;
}

} // namespace

bool HttpApi::bearerTokenOk(const HttpRequest& request, HttpResponse& response) const
{
    if (config_.metricsToken.empty()
        || sameSecret(request.header("Authorization"), "Bearer " + config_.metricsToken))
        return true;
    reply(response, 401, Json { { "error", "bearer token required" } });
    return false;
}

HttpApi::Served HttpApi::authenticated(Handler handler)
{
    return [this, handler](const HttpRequest& request, HttpResponse& response) {
        try {
            (this->*handler)(request, response, authenticate(request));
        } catch (const HttpError& error) {
            reply(response, error.status, Json { { "error", error.what() } });
        } catch (const std::invalid_argument& error) {
            reply(response, 400, Json { { "error", error.what() } });
        } catch (const Json::type_error& error) { // a member of the body of another type
            reply(
                response, 400, Json { { "error", std::string("malformed request body: ") + error.what() } });
        } catch (const db::DbError& error) {
            metrics_.dbErrors().Increment();
            logError(std::string("request ") + request.method + " " + request.path + ": " + error.what());
            reply(response, 503, Json { { "error", "database unavailable, try again" } });
        } catch (const std::exception& error) {
            // The log has what went wrong; the client hears only that it did (no internals).
            logError(std::string("request ") + request.method + " " + request.path + ": " + error.what());
            reply(response, 500, Json { { "error", "internal error; the service's log has the details" } });
        }
    };
}

Caller HttpApi::authenticate(const HttpRequest& request)
{
    const std::string header = request.header("Authorization");
    if (header.rfind(munge::authorizationScheme, 0) != 0)
        throw HttpError(401, "missing MUNGE credential (Authorization: MUNGE ...)");
    munge::Identity identity;
    try {
        identity = munge::decode(header.substr(munge::authorizationScheme.size()), config_.mungeSocket);
    } catch (const munge::MungeError& error) {
        if (error.kind() == munge::MungeError::Kind::Unavailable)
            throw HttpError(503, std::string("cannot check the credential: ") + error.what());
        throw HttpError(401, std::string("credential refused: ") + error.what());
    }
    if (identity.payload != munge::requestPayload(request.method, request.target, request.body))
        throw HttpError(401, "the credential was made for another request");
    {
        // munged refuses a second use at this instance; the record refuses it at the other, by the
        // credential's bytes: a copy respelled (a blank inserted) is the same credential to munged.
        auto lease = pool_.borrow();
        if (!CredentialStore(*lease).firstUse(munge::credentialBytes(header.substr(munge::authorizationScheme.size()))))
            throw HttpError(401, "credential refused: it was used before");
    }
    return identities_.resolve(identity);
}

} // namespace baton::service
