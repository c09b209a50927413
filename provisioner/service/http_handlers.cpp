// The handlers of batond's /v1 routes, one named function each; http_api.cpp authenticates the caller
// and maps what they throw to status codes.
#include "bounded_json.hpp"
#include "chain_views.hpp"
#include "http_api.hpp"
#include "http_reply.hpp"
#include "plugin_event.hpp"
#include "submitter.hpp"

#include "policy/policy.hpp"
#include "tables.hpp"

#include "common/baton_contract.hpp"
#include "db/transaction.hpp"
#include "slurm/sbatch_args.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

namespace baton::service {

namespace {

using Json = nlohmann::json;

// What POST /v1/chains asks for, checked.
struct NewChain {
    std::string name;
    Json spec; // script, sbatch_args, workdir, source
    std::optional<std::string> policy; // its own; none: the service's
};

// Who asked for a change of a chain, as its decision row records it.
Json requestedBy(const Caller& caller)
{
    return Json { { "by", caller.userName }, { "operator", caller.isOperator } };
}

// A chain's own policy as a request gives it: one that batond runs, or null (absent) for the service's.
std::optional<std::string> policyOf(const Json& body)
{
    const auto given = body.find("policy");
    if (given == body.end() || given->is_null())
        return std::nullopt;
    if (!given->is_string() || !sim::isLivePolicy(given->get<std::string>()))
        throw std::invalid_argument("'policy' must be null or one of " + sim::livePolicyList());
    return given->get<std::string>();
}

NewChain newChainOf(const Json& body)
{
    if (!body.is_object())
        throw std::invalid_argument("expected an object with name, script, sbatch_args, workdir");
    const std::string name = body.value("name", std::string());
    if (!contract::validChainName(name))
        throw std::invalid_argument("'name' must be " + contract::chainNameRule());
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
    return NewChain { name,
        Json { { "script", script }, { "sbatch_args", args }, { "workdir", workdir },
            { "source", "batonctl submit" } },
        policyOf(body) };
}

// A query parameter that must be a whole number 0..max; `fallback` when it is not given.
std::int64_t integerParam(
    const HttpRequest& request, const char* key, std::int64_t fallback, std::int64_t max)
{
    if (!request.hasParam(key))
        return fallback;
    const std::string text = request.param(key);
    std::int64_t value = -1;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < 0 || value > max)
        throw std::invalid_argument(
            std::string("'") + key + "' must be a whole number 0.." + std::to_string(max));
    return value;
}

// The chain named in the path, if the caller may see it (its owner or an operator); 404 otherwise,
// so that nobody learns which names other users have.
ChainRow findChain(Tables& tables, const HttpRequest& request, const Caller& caller)
{
    const std::string owner = request.matches[1];
    const std::string name = request.matches[2];
    const auto uid = IdentityResolver::uidOf(owner);
    std::optional<ChainRow> chain;
    if (uid)
        chain = tables.chains.find(*uid, name);
    if (!chain || (chain->ownerUid != caller.uid && !caller.isOperator))
        throw HttpError(404, "no chain " + owner + "/" + name);
    return *chain;
}

// The job of `seq` that has not ended, if any.
std::optional<std::int64_t> liveJobOf(Tables& tables, const ChainRow& chain, int seq)
{
    for (const JobRow& job : tables.jobs.ofChain(chain.id))
        if (job.seq == seq && !job.endTime)
            return job.slurmJobId;
    return std::nullopt;
}

// The chain as a write left it, as GET /v1/chains lists it (with its jobs' ids), for the write's reply.
Json chainAsWritten(Tables& tables, std::int64_t chainId, const std::string& policy)
{
    return ChainViews(tables.connection(), policy).summary(*tables.chains.find(chainId));
}

ChainEvent eventOfAction(const std::string& action)
{
    return action == "pause"  ? ChainEvent::Pause
        : action == "resume"  ? ChainEvent::Resume
        : action == "cancel"  ? ChainEvent::Cancel
        : action == "preempt" ? ChainEvent::Preempt
                              : ChainEvent::Resubmit;
}

[[noreturn]] void refuseAction(const std::string& action, const ChainRow& chain)
{
    throw HttpError(409,
        "cannot " + action + " chain " + chain.ownerName + "/" + chain.name + " while it is "
            + std::string(nameOf(chain.state)));
}

// The writes of an action on `chain`, in the caller's transaction; each is fenced on the state and seq
// the chain was read in.
void applyAction(Tables& tables, const ChainRow& chain, ChainEvent event,
    const std::string& action, const Caller& caller, bool currentEnded)
{
    const std::string by = " by " + caller.userName;
    switch (event) {
    case ChainEvent::Pause:
        if (!tables.chains.transition(chain, event, "paused" + by))
            refuseAction(action, chain);
        break;
    case ChainEvent::Resume:
        if (!tables.chains.transition(chain, event, "resumed" + by))
            refuseAction(action, chain);
        if (currentEnded)
            tables.chains.setResubmitRequested(chain.id, true);
        break;
    case ChainEvent::Cancel:
        // Written here, carried out by the tick: it cancels the chain's jobs as their owner until
        // slurmctld shows none left (no scancel in an HTTP worker).
        if (!tables.chains.transition(chain, event, "cancelled" + by))
            refuseAction(action, chain);
        tables.chains.setWithdrawJobs(chain.id, true);
        break;
    case ChainEvent::Preempt:
        // Written here, sent by the tick as the owner (no scancel in an HTTP worker).
        if (!liveJobOf(tables, chain, chain.seq))
            throw HttpError(409, "chain " + chain.name + " has no running job to preempt");
        tables.chains.setPreemptRequested(chain.id, true);
        break;
    default: // resubmit
        if (isTerminal(chain.state)) {
            // An ended chain runs again with a fresh retry budget, after every seq it used; the
            // tick submits the intent at once.
            const auto seq = tables.chains.restart(chain, event, "resubmitted" + by);
            if (!seq)
                refuseAction(action, chain);
            ChainRow restarted = chain;
            restarted.seq = *seq;
            if (!tables.submissions.recordIntent(
                    chain.id, *seq, Submitter::submissionKey(restarted, *seq), "restart"))
                refuseAction(action, chain);
        } else {
            // A live one gets its next job now.
            if (chain.state != ChainState::Running
                && !tables.chains.transition(chain, event, "resubmitted" + by))
                refuseAction(action, chain);
            tables.chains.setResubmitRequested(chain.id, true);
        }
    }
}

} // namespace

void HttpApi::postEvent(const HttpRequest& request, HttpResponse& response, const Caller& caller)
{
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
    Tables tables(*lease);
    const ScopedTimer timer(metrics_.dbCall());
    // An event is a hint that Slurm and later reports repeat: it does not wait for the disk.
    db::Transaction transaction(*lease, db::Durability::Relaxed);
    const bool inserted = tables.events.insert(
        posted.idempotencyKey, posted.kind, posted.chainName, posted.jobId, event, caller.uid);
    transaction.commit();
    metrics_.events(inserted ? "accepted" : "duplicate").Increment();
    reply(response, 202, Json { { "accepted", true }, { "duplicate", !inserted } });
}

void HttpApi::listChains(const HttpRequest& request, HttpResponse& response, const Caller& caller)
{
    std::optional<ChainState> state;
    if (request.hasParam("state")) {
        state = chainStateFromName(request.param("state"));
        if (!state)
            throw std::invalid_argument("unknown state '" + request.param("state") + "'");
    }
    // A page at a time, in chain id order: `limit` (at most maxPage) chains after the id `after`;
    // `next_after` is where the next page starts, null after the last one.
    constexpr std::int64_t maxPage = 1000;
    const std::int64_t limit = std::max<std::int64_t>(1, integerParam(request, "limit", maxPage, maxPage));
    const std::int64_t after = integerParam(request, "after", 0, std::numeric_limits<std::int64_t>::max());
    auto lease = pool_.borrow();
    ChainViews views(*lease, config_.policy);
    Json chains = Json::array();
    const std::vector<ChainRow> page = ChainStore(*lease).list(
        caller.isOperator ? std::nullopt : std::optional(caller.uid), state, after, limit + 1);
    for (std::size_t i = 0; i < page.size() && i < static_cast<std::size_t>(limit); ++i)
        chains.push_back(views.summary(page[i]));
    const bool more = page.size() > static_cast<std::size_t>(limit);
    reply(response, 200,
        Json { { "chains", chains },
            { "next_after", more ? Json(page[static_cast<std::size_t>(limit) - 1].id) : Json() } });
}

void HttpApi::showChain(const HttpRequest& request, HttpResponse& response, const Caller& caller)
{
    auto lease = pool_.borrow();
    Tables tables(*lease);
    const ChainRow chain = findChain(tables, request, caller);
    reply(response, 200, ChainViews(*lease, config_.policy).detail(chain));
}

void HttpApi::createChain(const HttpRequest& request, HttpResponse& response, const Caller& caller)
{
    // batond submits a chain's jobs as its owner: root and the SlurmUsers own none (batond would act with
    // their rights, and their credentials are the plugin's).
    if (caller.isSlurm)
        throw HttpError(403,
            "uid " + std::to_string(caller.uid)
                + " is root or one of slurm_users, which own no chains: submit as the user the jobs run as");
    const NewChain wanted = newChainOf(parseBoundedJson(request.body, config_.maxJsonDepth));
    const std::string& name = wanted.name;
    const Json& spec = wanted.spec;
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
    Tables tables(*lease);
    const auto exists = [&](const ChainRow& existing) {
        return HttpError(409,
            "chain " + caller.userName + "/" + name + " exists and is "
                + std::string(nameOf(existing.state)));
    };
    const auto existing = tables.chains.find(caller.uid, name);
    if (existing && !isTerminal(existing->state))
        throw exists(*existing);
    refuseOverLiveChainCap(tables, caller); // a new chain, or an ended one that starts over
    ChainRow chain;
    {
        db::Transaction transaction(*lease);
        chain = tables.chains.create(caller.uid, caller.userName, name, std::nullopt, spec, wanted.policy);
        if (existing) { // an ended chain of that name starts over, after every seq it used
            const auto seq = tables.chains.restart(
                *existing, ChainEvent::Resubmit, "resubmitted by " + caller.userName, spec);
            if (!seq)
                throw exists(*tables.chains.find(existing->id));
            chain.seq = *seq;
            chain.spec = spec; // the request's: the row read before the restart holds the old one
            tables.chains.setPolicy(chain.id, wanted.policy);
        }
        // Two requests for one name (a retry, a double click) record one intent: the second is
        // refused here instead of submitting a second first job.
        if (!tables.submissions.recordIntent(
                chain.id, chain.seq, Submitter::submissionKey(chain, chain.seq), "first"))
            throw HttpError(409, "chain " + caller.userName + "/" + name + " is being submitted already");
        transaction.commit();
    }
    const auto jobId = Submitter(tables, cluster_, metrics_).submitRecorded(chain, chain.seq);
    if (!jobId) {
        // Refused: a new chain is not kept (nothing of the request remains), an ended one that
        // was to run again is failed with the reason; neither waits for a job that never comes.
        const auto submission = tables.submissions.find(chain.id, chain.seq);
        const std::string why = submission ? submission->error : std::string("unknown error");
        if (!existing)
            tables.chains.deleteUnstarted(chain.id);
        else if (const auto now = tables.chains.find(chain.id))
            tables.chains.transition(*now, ChainEvent::RetryBudgetSpent, "sbatch refused its job: " + why);
        throw HttpError(502, "sbatch refused the job: " + why);
    }
    reply(response, 201,
        Json { { "chain", chainAsWritten(tables, chain.id, config_.policy) }, { "job_id", *jobId } });
}

// max_live_chains_per_user counts every live chain of the owner, however it began.
void HttpApi::refuseOverLiveChainCap(Tables& tables, const Caller& caller) const
{
    if (config_.maxLiveChainsPerUser <= 0)
        return;
    const std::int64_t live = tables.chains.liveCount(caller.uid);
    if (live >= config_.maxLiveChainsPerUser)
        throw HttpError(429,
            "you have " + std::to_string(live) + " live chains, the most this service allows per user");
}

void HttpApi::actOnChain(const HttpRequest& request, HttpResponse& response, const Caller& caller)
{
    auto lease = pool_.borrow();
    Tables tables(*lease);
    const ChainRow chain = findChain(tables, request, caller);
    const std::string action = request.matches[3];
    const Json who = requestedBy(caller);
    const ChainEvent event = eventOfAction(action);
    // The state machine's table decides; every write below is fenced on the state and seq read
    // above, so a request that raced the tick or another request is refused, not half applied.
    if (!isAllowed(chain.state, event))
        refuseAction(action, chain);
    if (isTerminal(chain.state)) // a resubmit makes an ended chain live again
        refuseOverLiveChainCap(tables, caller);
    // A chain whose current job has ended asks for its next job when it runs again, instead of
    // judging that ended job once more (a cancelled one would pause it again).
    const bool currentEnded = !liveJobOf(tables, chain, chain.seq);
    db::Transaction transaction(*lease);
    applyAction(tables, chain, event, action, caller, currentEnded);
    transaction.commit();
    tables.decisions.record(chain.id, "user", action, who, "requested");
    reply(response, 200, Json { { "chain", chainAsWritten(tables, chain.id, config_.policy) } });
}

void HttpApi::setChainPolicy(
    const HttpRequest& request, HttpResponse& response, const Caller& caller)
{
    const Json body = parseBoundedJson(request.body, config_.maxJsonDepth);
    if (!body.is_object() || !body.contains("policy"))
        throw std::invalid_argument(
            "expected an object with 'policy' (a policy's name, or null for the service's)");
    const std::optional<std::string> policy = policyOf(body);
    auto lease = pool_.borrow();
    Tables tables(*lease);
    const ChainRow chain = findChain(tables, request, caller);
    // The next tick decides by it, whatever the chain's state; the change is on the chain's record.
    db::Transaction transaction(*lease);
    tables.chains.setPolicy(chain.id, policy);
    Json inputs = requestedBy(caller);
    inputs["policy"] = policy ? Json(*policy) : Json();
    tables.decisions.record(chain.id, "user", "policy", inputs, "requested");
    transaction.commit();
    reply(response, 200, Json { { "chain", chainAsWritten(tables, chain.id, config_.policy) } });
}

} // namespace baton::service
