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
    , server_(std::make_unique<httplib::Server>())
{
    server_->new_task_queue = [threads = config.httpThreads] { return new httplib::ThreadPool(threads); };
    server_->set_payload_max_length(config.maxBodyBytes);
    server_->set_read_timeout(std::chrono::seconds(10));
    server_->set_write_timeout(std::chrono::seconds(10));
    server_->set_keep_alive_timeout(5);
    // One request per connection: an idle kept-alive connection holds a worker, and the clients (the
    // plugin, batonctl) send one request each anyway.
    server_->set_keep_alive_max_count(1);
    server_->set_tcp_nodelay(true); // replies are small: no Nagle delay against the client's delayed ACK
    routes();
}

HttpApi::~HttpApi() = default;

int HttpApi::bind()
{
    if (config_.listenPort == 0) {
        const int port = server_->bind_to_any_port(config_.listenAddress);
        if (port < 0)
            throw std::runtime_error("cannot listen on " + config_.listenAddress);
        return port;
    }
    if (!server_->bind_to_port(config_.listenAddress, config_.listenPort))
        throw std::runtime_error(
            "cannot listen on " + config_.listenAddress + ":" + std::to_string(config_.listenPort));
    return config_.listenPort;
}

void HttpApi::serve()
{
    server_->listen_after_bind();
}

void HttpApi::stop()
{
    server_->stop();
}

void HttpApi::routes()
{
    server_->Get("/healthz", [this](const httplib::Request& request, httplib::Response& response) {
        if (bearerTokenOk(request, response))
            response.set_content("ok\n", "text/plain");
    });
    server_->Get("/readyz", [this](const httplib::Request& request, httplib::Response& response) {
        if (!bearerTokenOk(request, response))
            return;
        const Readiness readiness = readiness_();
        response.status = readiness.ready ? 200 : 503;
        response.set_content(readiness.detail + "\n", "text/plain");
    });
    server_->Get("/metrics", [this](const httplib::Request& request, httplib::Response& response) {
        if (bearerTokenOk(request, response))
            response.set_content(metrics_.render(), "text/plain; version=0.0.4");
    });

    server_->Post("/v1/events", authenticated(&HttpApi::postEvent));
    server_->Get("/v1/chains", authenticated(&HttpApi::listChains));
    server_->Get(chainPath, authenticated(&HttpApi::showChain));
    server_->Post("/v1/chains", authenticated(&HttpApi::createChain));
    server_->Post(actionPath, authenticated(&HttpApi::actOnChain));
    server_->Post(policyPath, authenticated(&HttpApi::setChainPolicy));

    server_->set_error_handler([](const httplib::Request&, httplib::Response& response) {
        if (response.body.empty()) {
            const std::string message = response.status == 413 ? "the body is too large"
                : response.status == 404                       ? "no such resource"
                                                               : "request refused";
            reply(response, response.status, Json { { "error", message } });
        }
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

bool HttpApi::bearerTokenOk(const httplib::Request& request, httplib::Response& response) const
{
    if (config_.metricsToken.empty()
        || sameSecret(request.get_header_value("Authorization"), "Bearer " + config_.metricsToken))
        return true;
    reply(response, 401, Json { { "error", "bearer token required" } });
    return false;
}

HttpApi::Served HttpApi::authenticated(Handler handler)
{
    return [this, handler](const httplib::Request& request, httplib::Response& response) {
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

Caller HttpApi::authenticate(const httplib::Request& request)
{
    const std::string header = request.get_header_value("Authorization");
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
