#include "http_api.hpp"

#include "bounded_json.hpp"
#include "log.hpp"
#include "plugin_event.hpp"
#include "store.hpp"
#include "submitter.hpp"

#include <baton_contract.hpp>
#include <errors.hpp>
#include <sbatch_args.hpp>
#include <transaction.hpp>

#include <httplib.h>

#include <charconv>
#include <limits>

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
                {
                    // munged refuses a second use at this instance; the record refuses it at the other.
                    auto lease = pool_.borrow();
                    if (!Store(*lease).firstUseOfCredential(header))
                        throw HttpError(401, "credential refused: it was used before");
                }
                handler(request, response, identities_.resolve(identity));
            } catch (const HttpError& error) {
                reply(response, error.status, Json { { "error", error.what() } });
            } catch (const std::invalid_argument& error) {
                reply(response, 400, Json { { "error", error.what() } });
            } catch (const Json::type_error& error) { // a member of the body of another type
                reply(response, 400,
                    Json { { "error", std::string("malformed request body: ") + error.what() } });
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
            const PluginEvent posted = PluginEvent::posted(event);
            auto lease = pool_.borrow();
            Store store(*lease);
            const ScopedTimer timer(metrics_.dbCall());
            // An event is a hint that Slurm and later reports repeat: it does not wait for the disk.
            db::Transaction transaction(*lease);
            (*lease).execScript("SET LOCAL synchronous_commit TO off");
            const bool inserted = store.insertEvent(
                posted.idempotencyKey, posted.kind, posted.chainName, posted.jobId, event, caller.uid);
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
            // A page at a time, in chain id order: `limit` (at most maxPage) chains after the id `after`;
            // `next_after` is where the next page starts, null after the last one.
            const auto integerParam = [&](const char* key, std::int64_t fallback, std::int64_t max) {
                if (!request.has_param(key))
                    return fallback;
                const std::string text = request.get_param_value(key);
                std::int64_t value = -1;
                const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
                if (error != std::errc() || end != text.data() + text.size() || value < 0 || value > max)
                    throw std::invalid_argument(
                        std::string("'") + key + "' must be a whole number 0.." + std::to_string(max));
                return value;
            };
            constexpr std::int64_t maxPage = 1000;
            const std::int64_t limit = std::max<std::int64_t>(1, integerParam("limit", maxPage, maxPage));
            const std::int64_t after = integerParam("after", 0, std::numeric_limits<std::int64_t>::max());
            auto lease = pool_.borrow();
            Store store(*lease);
            Json chains = Json::array();
            const std::vector<ChainRow> page = store.chains(
                caller.isOperator ? std::nullopt : std::optional(caller.uid), state, after, limit + 1);
            for (std::size_t i = 0; i < page.size() && i < static_cast<std::size_t>(limit); ++i) {
                const ChainRow& chain = page[i];
                Json row = chain.toJson();
                for (const JobRow& job : store.jobs(chain.id)) {
                    if (job.withdrawn)
                        continue;
                    if (job.seq == chain.seq)
                        row["current_job"] = job.slurmJobId;
                    if (job.seq == chain.seq + 1)
                        row["pending_job"] = job.slurmJobId;
                }
                if (const auto newest = store.latestCheckpoint(chain.id))
                    row["checkpoint"] = *newest;
                chains.push_back(row);
            }
            const bool more = page.size() > static_cast<std::size_t>(limit);
            reply(response, 200,
                Json { { "chains", chains },
                    { "next_after", more ? Json(page[static_cast<std::size_t>(limit) - 1].id) : Json() } });
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
            if (!contract::validChainName(name))
                throw std::invalid_argument("'name' must be 1-" + std::to_string(contract::kChainNameMax)
                    + " characters of letters, digits, '.', '_' and '-', not starting with '.' or '-'");
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
            // Refused when the chain is created, not at its first submission: a chain never holds a
            // spec that sbatch must not run (`--wait` would hold batond's child, `--uid` act for another).
            if (const auto refused = slurm::checkSbatchArgs(args.get<std::vector<std::string>>()))
                throw std::invalid_argument(*refused);
            if (const auto refused = slurm::checkScriptDirectives(script))
                throw std::invalid_argument(*refused);
            const Json spec { { "script", script }, { "sbatch_args", args }, { "workdir", workdir },
                { "source", "batonctl submit" } };
            // sbatch runs in this worker (up to slurm_timeout_seconds): a user gets a few workers at once.
            {
                const std::lock_guard lock(submittingMutex_);
                if (submitting_[caller.uid] >= maxSubmittingPerUser)
                    throw HttpError(429,
                        "you have " + std::to_string(maxSubmittingPerUser)
                            + " chain submissions in progress; try again when they are done");
                ++submitting_[caller.uid];
            }
            struct Release {
                HttpApi& api;
                std::int64_t uid;
                ~Release()
                {
                    const std::lock_guard lock(api.submittingMutex_);
                    if (--api.submitting_[uid] == 0)
                        api.submitting_.erase(uid);
                }
            } release { *this, caller.uid };
            auto lease = pool_.borrow();
            Store store(*lease);
            const auto exists = [&](const ChainRow& existing) {
                return HttpError(409,
                    "chain " + caller.userName + "/" + name + " exists and is "
                        + std::string(nameOf(existing.state)));
            };
            const auto existing = store.chain(caller.uid, name);
            if (existing && !isTerminal(existing->state))
                throw exists(*existing);
            if (!existing && config_.maxLiveChainsPerUser > 0) {
                const auto owned = store.chains(caller.uid, std::nullopt);
                const auto live = std::count_if(
                    owned.begin(), owned.end(), [](const ChainRow& c) { return !isTerminal(c.state); });
                if (live >= config_.maxLiveChainsPerUser)
                    throw HttpError(429,
                        "you have " + std::to_string(live)
                            + " live chains, the most this service allows per user");
            }
            ChainRow chain;
            {
                db::Transaction transaction(*lease);
                chain = store.createChain(caller.uid, caller.userName, name, std::nullopt, spec);
                if (existing) { // an ended chain of that name starts over, after every seq it used
                    const auto seq = store.restart(
                        *existing, ChainEvent::Resubmit, "resubmitted by " + caller.userName, spec);
                    if (!seq)
                        throw exists(*store.chain(existing->id));
                    chain.seq = *seq;
                }
                // Two requests for one name (a retry, a double click) record one intent: the second is
                // refused here instead of submitting a second first job.
                if (!store.recordIntent(
                        chain.id, chain.seq, Submitter::submissionKey(chain, chain.seq), "first"))
                    throw HttpError(
                        409, "chain " + caller.userName + "/" + name + " is being submitted already");
                transaction.commit();
            }
            const auto jobId = Submitter(store, cluster_, metrics_).submitRecorded(chain, chain.seq);
            if (!jobId) {
                // Refused: a new chain is not kept (nothing of the request remains), an ended one that
                // was to run again is failed with the reason; neither waits for a job that never comes.
                const auto submission = store.submission(chain.id, chain.seq);
                const std::string why = submission ? submission->error : std::string("unknown error");
                if (!existing)
                    store.deleteUnstartedChain(chain.id);
                else if (const auto now = store.chain(chain.id))
                    store.transition(*now, ChainEvent::RetryBudgetSpent, "sbatch refused its job: " + why);
                throw HttpError(502, "sbatch refused the job: " + why);
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
            const ChainEvent event = action == "pause" ? ChainEvent::Pause
                : action == "resume"                   ? ChainEvent::Resume
                : action == "cancel"                   ? ChainEvent::Cancel
                : action == "preempt"                  ? ChainEvent::Preempt
                                                       : ChainEvent::Resubmit;
            // The state machine's table decides; every write below is fenced on the state and seq read
            // above, so a request that raced the tick or another request is refused, not half applied.
            if (!isAllowed(chain.state, event))
                refuse();
            const std::string by = " by " + caller.userName;
            // A chain whose current job has ended asks for its next job when it runs again, instead of
            // judging that ended job once more (a cancelled one would pause it again).
            const bool currentEnded = !jobOf(chain.seq);
            db::Transaction transaction(*lease);
            switch (event) {
            case ChainEvent::Pause:
                if (!store.transition(chain, event, "paused" + by))
                    refuse();
                break;
            case ChainEvent::Resume:
                if (!store.transition(chain, event, "resumed" + by))
                    refuse();
                if (currentEnded)
                    store.setResubmitRequested(chain.id, true);
                break;
            case ChainEvent::Cancel:
                // Written here, carried out by the tick: it cancels the chain's jobs as their owner until
                // slurmctld shows none left (no scancel in an HTTP worker).
                if (!store.transition(chain, event, "cancelled" + by))
                    refuse();
                store.setWithdrawJobs(chain.id, true);
                break;
            case ChainEvent::Preempt: {
                const auto job = jobOf(chain.seq);
                if (!job)
                    throw HttpError(409, "chain " + chain.name + " has no running job to preempt");
                cluster_.signal(*job, "TERM", store.checkpointSignalScope(*job), chain.ownerUid);
                break;
            }
            default: // resubmit
                if (isTerminal(chain.state)) {
                    // An ended chain runs again with a fresh retry budget, after every seq it used; the
                    // tick submits the intent at once.
                    const auto seq = store.restart(chain, event, "resubmitted" + by);
                    if (!seq)
                        refuse();
                    ChainRow restarted = chain;
                    restarted.seq = *seq;
                    if (!store.recordIntent(
                            chain.id, *seq, Submitter::submissionKey(restarted, *seq), "restart"))
                        refuse();
                } else {
                    // A live one gets its next job now.
                    if (chain.state != ChainState::Running
                        && !store.transition(chain, event, "resubmitted" + by))
                        refuse();
                    store.setResubmitRequested(chain.id, true);
                }
            }
            transaction.commit();
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
