#include "http_api.hpp"

#include "log.hpp"
#include "provisioner.hpp"
#include "store.hpp"

#include <errors.hpp>
#include <sbatch_args.hpp>
#include <transaction.hpp>

#include <httplib.h>

namespace baton::service {

namespace {

using Json = nlohmann::json;

// A refusal with its HTTP status, turned into {"error": ...} by the handler wrapper.
struct HttpError : std::runtime_error {
    HttpError(int status, const std::string& message)
        : std::runtime_error(message)
        , status(status)
    { }
    int status;
};

void reply(httplib::Response& response, int status, const Json& body)
{
    response.status = status;
    response.set_content(body.dump() + "\n", "application/json");
}

const std::string chainPath(R"(/v1/chains/([A-Za-z0-9._-]{1,64})/([^/]{1,256}))");
const std::string actionPath(
    R"(/v1/chains/([A-Za-z0-9._-]{1,64})/([^/]{1,256})/(resubmit|preempt|pause|resume|cancel))");

bool validChainName(const std::string& name)
{
    if (name.empty() || name.size() > 200 || name == "." || name == "..")
        return false;
    return std::all_of(name.begin(), name.end(),
        [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '_' || c == '-'; });
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool validUtf8(std::string_view text)
{
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = 0;
        std::uint32_t point = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            length = 2;
            point = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            length = 3;
            point = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            length = 4;
            point = c & 0x07;
        } else {
            return false;
        }
        if (i + length > text.size())
            return false;
        for (std::size_t k = 1; k < length; ++k) {
            const auto next = static_cast<unsigned char>(text[i + k]);
            if ((next & 0xC0) != 0x80)
                return false;
            point = (point << 6) | (next & 0x3F);
        }
        static constexpr std::uint32_t smallest[] = { 0, 0, 0x80, 0x800, 0x10000 };
        if (point < smallest[length] || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF))
            return false;
        i += length;
    }
    return true;
}

} // namespace

Json parseBoundedJson(const std::string& body, int maxDepth)
{
    if (body.find('\0') != std::string::npos)
        throw std::invalid_argument("the body contains a NUL byte");
    if (!validUtf8(body))
        throw std::invalid_argument("the body is not valid UTF-8");
    if (body.find("\\u0000") != std::string::npos)
        throw std::invalid_argument("the body contains an escaped NUL character");
    // The callback stops the parse as soon as it nests too deep, before a deep value is ever built.
    const nlohmann::json::parser_callback_t bounded = [maxDepth](
                                                          int depth, Json::parse_event_t event, Json&) {
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start)
            && depth >= maxDepth)
            throw std::invalid_argument("the body nests deeper than " + std::to_string(maxDepth) + " levels");
        return true;
    };
    try {
        return Json::parse(body, bounded); // rejects invalid UTF-8 in strings
    } catch (const Json::exception& error) {
        throw std::invalid_argument(std::string("the body is not valid JSON: ") + error.what());
    }
}

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
    // Authenticates, runs the handler, and maps failures to status codes with a readable body.
    using Handler = std::function<void(const httplib::Request&, httplib::Response&, const Caller&)>;
    const auto authenticated = [this](Handler handler) {
        return [this, handler](const httplib::Request& request, httplib::Response& response) {
            try {
                const std::string header = request.get_header_value("Authorization");
                if (header.rfind(munge::authorizationScheme, 0) != 0)
                    throw HttpError(401, "missing MUNGE credential (Authorization: MUNGE ...)");
                munge::Identity identity;
                try {
                    identity = munge::decode(
                        header.substr(munge::authorizationScheme.size()), config_.mungeSocket);
                } catch (const munge::MungeError& error) {
                    if (error.kind() == munge::MungeError::Kind::Unavailable)
                        throw HttpError(503, std::string("cannot check the credential: ") + error.what());
                    throw HttpError(401, std::string("credential refused: ") + error.what());
                }
                if (identity.payload != munge::requestPayload(request.method, request.target, request.body))
                    throw HttpError(401, "the credential was made for another request");
                handler(request, response, identities_.resolve(identity));
            } catch (const HttpError& error) {
                reply(response, error.status, Json { { "error", error.what() } });
            } catch (const std::invalid_argument& error) {
                reply(response, 400, Json { { "error", error.what() } });
            } catch (const db::DbError& error) {
                metrics_.dbErrors().Increment();
                logError(std::string("request ") + request.method + " " + request.path + ": " + error.what());
                reply(response, 503, Json { { "error", "database unavailable, try again" } });
            } catch (const std::exception& error) {
                logError(std::string("request ") + request.method + " " + request.path + ": " + error.what());
                reply(response, 500, Json { { "error", error.what() } });
            }
        };
    };
    // /metrics, /healthz and /readyz: open, or behind a bearer token when one is configured.
    const auto tokenOk = [this](const httplib::Request& request, httplib::Response& response) {
        if (config_.metricsToken.empty()
            || request.get_header_value("Authorization") == "Bearer " + config_.metricsToken)
            return true;
        reply(response, 401, Json { { "error", "bearer token required" } });
        return false;
    };

    server_->Get("/healthz", [tokenOk](const httplib::Request& request, httplib::Response& response) {
        if (tokenOk(request, response))
            response.set_content("ok\n", "text/plain");
    });
    server_->Get("/readyz", [this, tokenOk](const httplib::Request& request, httplib::Response& response) {
        if (!tokenOk(request, response))
            return;
        const Readiness readiness = readiness_();
        response.status = readiness.ready ? 200 : 503;
        response.set_content(readiness.detail + "\n", "text/plain");
    });
    server_->Get("/metrics", [this, tokenOk](const httplib::Request& request, httplib::Response& response) {
        if (tokenOk(request, response))
            response.set_content(metrics_.render(), "text/plain; version=0.0.4");
    });

    server_->Post(
        "/v1/events", authenticated([this](const auto& request, auto& response, const Caller& caller) {
            if (!caller.isSlurm) {
                metrics_.events("rejected").Increment();
                throw HttpError(403, "events are accepted from root and the configured Slurm users only");
            }
            Json event;
            try {
                event = parseBoundedJson(request.body, config_.maxJsonDepth);
            } catch (const std::invalid_argument&) {
                metrics_.events("rejected").Increment();
                throw;
            }
            const auto text = [&](const char* key, std::size_t max) {
                const auto found = event.find(key);
                if (found == event.end() || !found->is_string() || found->template get<std::string>().empty()
                    || found->template get<std::string>().size() > max)
                    throw std::invalid_argument(std::string("'") + key
                        + "' must be a non-empty string of at most " + std::to_string(max) + " bytes");
                return found->template get<std::string>();
            };
            if (!event.is_object())
                throw std::invalid_argument("an event is a JSON object");
            const auto version = event.find("version");
            if (version == event.end() || !version->is_number_integer() || *version < 1 || *version > 2)
                throw std::invalid_argument("'version' must be 1 or 2");
            const std::string key = text("idempotency_key", 256);
            const std::string kind = text("kind", 64);
            const std::string chain = text("chain", 256);
            const auto jobId = event.find("job_id");
            if (jobId == event.end() || !jobId->is_number_integer() || *jobId <= 0)
                throw std::invalid_argument("'job_id' must be a positive integer");
            auto lease = pool_.borrow();
            Store store(*lease);
            const ScopedTimer timer(metrics_.dbCall());
            // An event is a hint that Slurm and later reports repeat: it does not wait for the disk.
            db::Transaction transaction(*lease);
            (*lease).execScript("SET LOCAL synchronous_commit TO off");
            const bool inserted
                = store.insertEvent(key, kind, chain, jobId->template get<std::int64_t>(), event, caller.uid);
            transaction.commit();
            metrics_.events(inserted ? "accepted" : "duplicate").Increment();
            reply(response, 202, Json { { "accepted", true }, { "duplicate", !inserted } });
        }));

    server_->Get(
        "/v1/chains", authenticated([this](const auto& request, auto& response, const Caller& caller) {
            std::optional<ChainState> state;
            if (request.has_param("state")) {
                state = chainStateFromName(request.get_param_value("state"));
                if (!state)
                    throw std::invalid_argument("unknown state '" + request.get_param_value("state") + "'");
            }
            auto lease = pool_.borrow();
            Store store(*lease);
            Json chains = Json::array();
            for (const ChainRow& chain :
                store.chains(caller.isOperator ? std::nullopt : std::optional(caller.uid), state)) {
                Json row = chain.toJson();
                for (const JobRow& job : store.jobs(chain.id)) {
                    if (job.seq == chain.seq)
                        row["current_job"] = job.slurmJobId;
                    if (job.seq == chain.seq + 1)
                        row["pending_job"] = job.slurmJobId;
                }
                if (const auto newest = store.latestCheckpoint(chain.id))
                    row["checkpoint"] = *newest;
                chains.push_back(row);
            }
            reply(response, 200, Json { { "chains", chains } });
        }));

    // The chain named in the path, if the caller may see it (its owner or an operator); 404 otherwise,
    // so that nobody learns which names other users have.
    const auto findChain = [](Store& store, const httplib::Request& request, const Caller& caller) {
        const std::string owner = request.matches[1];
        const std::string name = request.matches[2];
        const auto uid = IdentityResolver::uidOf(owner);
        std::optional<ChainRow> chain;
        if (uid)
            chain = store.chain(*uid, name);
        if (!chain || (chain->ownerUid != caller.uid && !caller.isOperator))
            throw HttpError(404, "no chain " + owner + "/" + name);
        return *chain;
    };

    server_->Get(chainPath,
        authenticated([this, findChain](const auto& request, auto& response, const Caller& caller) {
            auto lease = pool_.borrow();
            Store store(*lease);
            const ChainRow chain = findChain(store, request, caller);
            reply(response, 200, store.detail(chain));
        }));

    server_->Post(
        "/v1/chains", authenticated([this](const auto& request, auto& response, const Caller& caller) {
            const Json body = parseBoundedJson(request.body, config_.maxJsonDepth);
            if (!body.is_object())
                throw std::invalid_argument("expected an object with name, script, sbatch_args, workdir");
            const std::string name = body.value("name", std::string());
            if (!validChainName(name))
                throw std::invalid_argument(
                    "'name' must be 1-200 characters of letters, digits, '.', '_' and '-'");
            const std::string script = body.value("script", std::string());
            if (script.empty() || script.rfind("#!", 0) != 0)
                throw std::invalid_argument("'script' must be a batch script's text, starting with #!");
            const std::string workdir = body.value("workdir", std::string());
            if (workdir.empty() || workdir.front() != '/')
                throw std::invalid_argument("'workdir' must be an absolute path");
            Json args = Json::array();
            if (const auto given = body.find("sbatch_args"); given != body.end()) {
                if (!given->is_array() || given->size() > 64)
                    throw std::invalid_argument("'sbatch_args' must be an array of at most 64 strings");
                for (const auto& arg : *given) {
                    if (!arg.is_string() || arg.template get<std::string>().size() > 4096)
                        throw std::invalid_argument("'sbatch_args' must hold strings");
                    args.push_back(arg);
                }
            }
            if (const auto refused = slurm::checkSbatchArgs(args.get<std::vector<std::string>>()))
                throw std::invalid_argument(*refused);
            const Json spec { { "script", script }, { "sbatch_args", args }, { "workdir", workdir },
                { "source", "batonctl submit" } };
            auto lease = pool_.borrow();
            Store store(*lease);
            if (const auto existing = store.chain(caller.uid, name); existing && !isTerminal(existing->state))
                throw HttpError(409,
                    "chain " + caller.userName + "/" + name + " exists and is "
                        + std::string(nameOf(existing->state)));
            ChainRow chain;
            {
                db::Transaction transaction(*lease);
                chain = store.createChain(caller.uid, caller.userName, name, std::nullopt, spec);
                if (isTerminal(chain.state)) { // a finished chain of that name starts over
                    store.setSpec(chain.id, spec);
                    store.transition(chain.id, { chain.state }, ChainState::Running, "resubmitted");
                }
                chain = *store.chain(chain.id);
                const int seq = chain.seq + (store.submission(chain.id, chain.seq) ? 1 : 0);
                if (seq != chain.seq)
                    store.advance(chain.id, chain.seq, ChainState::Running);
                chain.seq = seq;
                store.recordIntent(chain.id, seq, Provisioner::submissionKey(chain.id, seq), "first");
                transaction.commit();
            }
            Provisioner provisioner(config_, store, cluster_, metrics_, nullptr, nullptr);
            const auto jobId = provisioner.submitRecorded(chain, chain.seq);
            if (!jobId) {
                const auto submission = store.submission(chain.id, chain.seq);
                throw HttpError(502,
                    "sbatch refused the job: "
                        + (submission ? submission->error : std::string("unknown error")));
            }
            reply(response, 201, Json { { "chain", store.chain(chain.id)->toJson() }, { "job_id", *jobId } });
        }));

    server_->Post(actionPath,
        authenticated([this, findChain](const auto& request, auto& response, const Caller& caller) {
            auto lease = pool_.borrow();
            Store store(*lease);
            const ChainRow chain = findChain(store, request, caller);
            const std::string action = request.matches[3];
            const Json who { { "by", caller.userName }, { "operator", caller.isOperator } };
            const auto jobOf = [&](int seq) -> std::optional<std::int64_t> {
                for (const JobRow& job : store.jobs(chain.id))
                    if (job.seq == seq && !job.endTime)
                        return job.slurmJobId;
                return std::nullopt;
            };
            const auto refuse = [&] {
                throw HttpError(409,
                    "cannot " + action + " chain " + chain.ownerName + "/" + chain.name + " while it is "
                        + std::string(nameOf(chain.state)));
            };
            if (action == "pause") {
                if (!store.transition(chain.id,
                        { ChainState::Running, ChainState::SuccessorPending, ChainState::Handover },
                        ChainState::Paused, "paused by " + caller.userName))
                    refuse();
            } else if (action == "resume") {
                if (!store.transition(chain.id, { ChainState::Paused }, ChainState::Running,
                        "resumed by " + caller.userName))
                    refuse();
            } else if (action == "cancel") {
                if (!store.transition(chain.id,
                        { ChainState::Running, ChainState::SuccessorPending, ChainState::Handover,
                            ChainState::Paused },
                        ChainState::Cancelled, "cancelled by " + caller.userName))
                    refuse();
                // Written first, then acted on: the chain is cancelled even if a scancel fails.
                for (const int seq : { chain.seq, chain.seq + 1 })
                    if (const auto job = jobOf(seq))
                        cluster_.cancel(*job, chain.ownerUid);
            } else if (action == "preempt") {
                if (chain.state != ChainState::Running && chain.state != ChainState::SuccessorPending)
                    refuse();
                const auto job = jobOf(chain.seq);
                if (!job)
                    throw HttpError(409, "chain " + chain.name + " has no running job to preempt");
                cluster_.signal(*job, "TERM", store.checkpointSignalScope(*job), chain.ownerUid);
            } else if (action == "resubmit") {
                // A failed chain runs again with a fresh retry budget; a live one gets its next job now.
                if (chain.state == ChainState::Failed || chain.state == ChainState::Cancelled) {
                    db::Transaction transaction(*lease);
                    store.transition(
                        chain.id, { chain.state }, ChainState::Running, "resubmitted by " + caller.userName);
                    store.setRetries(chain.id, 0);
                    store.setResubmitRequested(chain.id, true);
                    transaction.commit();
                } else if (chain.state == ChainState::Running || chain.state == ChainState::Paused) {
                    store.setResubmitRequested(chain.id, true);
                    store.transition(chain.id, { ChainState::Paused }, ChainState::Running,
                        "resubmitted by " + caller.userName);
                } else {
                    refuse();
                }
            }
            store.recordDecision(chain.id, "user", action, who, "requested");
            reply(response, 200, Json { { "chain", store.chain(chain.id)->toJson() } });
        }));

    server_->set_error_handler([](const httplib::Request&, httplib::Response& response) {
        if (response.body.empty()) {
            const std::string message = response.status == 413 ? "the body is too large"
                : response.status == 404                       ? "no such resource"
                                                               : "request refused";
            reply(response, response.status, Json { { "error", message } });
        }
    });
}

} // namespace baton::service
