#include "provisioner.hpp"

#include "event_subject.hpp"
#include "identity.hpp"
#include "log.hpp"
#include "owner_files.hpp"

#include "db/errors.hpp"
#include "slurm/command.hpp"
#include "slurm/sbatch_args.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <unordered_set>
#include <utility>

namespace baton::service {

namespace {

using Json = nlohmann::json;

std::int64_t epochNow()
{
    return std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::system_clock::now().time_since_epoch())
        .count();
}

} // namespace

Json specFromJob(const ClusterJob& job, const std::string& script)
{
    Json args = Json::array();
    if (job.timeLimitSeconds > 0)
        args.push_back("--time=" + std::to_string((job.timeLimitSeconds + 59) / 60));
    const int nodes = std::max(1, job.nodes);
    args.push_back("--nodes=" + std::to_string(nodes));
    if (!job.name.empty())
        args.push_back("--job-name=" + job.name);
    if (!job.partition.empty())
        args.push_back("--partition=" + job.partition);
    // The request as slurmctld holds it, from the command line and the #SBATCH lines alike. Defaults
    // (one task per node, one CPU per task) are left to sbatch.
    const JobRequest& r = job.request;
    auto add = [&](const char* option, const std::string& value) {
        if (!value.empty())
            args.push_back(std::string(option) + "=" + value);
    };
    add("--account", r.account);
    add("--qos", r.qos);
    add("--gres", r.gres);
    add("--constraint", r.constraint);
    if (r.tasks > nodes)
        add("--ntasks", std::to_string(r.tasks));
    if (r.tasksPerNode > 0)
        add("--ntasks-per-node", std::to_string(r.tasksPerNode));
    if (r.cpusPerTask > 1)
        add("--cpus-per-task", std::to_string(r.cpusPerTask));
    if (r.memPerNodeMiB > 0)
        add("--mem", std::to_string(r.memPerNodeMiB) + "M");
    else if (r.memPerCpuMiB > 0)
        add("--mem-per-cpu", std::to_string(r.memPerCpuMiB) + "M");
    return Json { { "script", script }, { "sbatch_args", args }, { "workdir", job.workdir },
        { "source", "job " + std::to_string(job.id) },
        { "note",
            "the batch script (with its #SBATCH lines) of job " + std::to_string(job.id)
                + " and what slurmctld reports of its request (time limit, nodes, tasks, CPUs per task, "
                  "memory, GRES, account, QOS, constraint, job name, partition) are reused; other options "
                  "given only on its sbatch command line (--exclusive, --mail-type, --licenses, ...) are "
                  "not: write them as #SBATCH lines, or use `batonctl submit`" } };
}

Provisioner::Provisioner(const ServiceConfig& config, Tables& tables, Cluster& cluster, Metrics& metrics,
    ChainPolicies policies, DecisionPointBuilder decisionPoint)
    : config_(config)
    , tables_(tables)
    , cluster_(cluster)
    , metrics_(metrics)
    , policies_(std::move(policies))
    , decisionPoint_(std::move(decisionPoint))
    , submitter_(tables, cluster, metrics)
{ }

void Provisioner::tick()
{
    const ScopedTimer timer(metrics_.tick());
    // squeue and its document take the longest: the reads that do not depend on the queue run meanwhile.
    // (The Slurm calls are timed and their failures counted in one place, the live Cluster.)
    auto queueRead = std::async(std::launch::async, [this] { return cluster_.queue(); });
    // Bookkeeping (job rows, wait decisions, processed events) can be rebuilt from Slurm after a crash,
    // so it commits without waiting for the disk; the transactions that fence an action (a submission's
    // intent, a handover) are durable transactions (db::Durability::Durable).
    if (tables_.connection().session() != bookkeepingSession_) {
        tables_.connection().execScript("SET synchronous_commit TO off");
        bookkeepingSession_ = tables_.connection().session();
    }
    const std::vector<EventRow> events = tables_.events.unprocessed(maxEventsPerTick);
    // Events may register chains and adopt jobs, so the live chains are read before them only when
    // there are none.
    std::optional<std::vector<LiveChain>> liveChains;
    if (events.empty())
        liveChains = readLiveChains(tables_.connection(), liveChainCache_);
    const ClusterQueue queue = queueRead.get();
    now_ = queue.takenAt() > 0 ? queue.takenAt() : epochNow();
    processEvents(events, queue);
    if (!liveChains)
        liveChains = readLiveChains(tables_.connection(), liveChainCache_);
    std::vector<AwaitingDecision> awaiting;
    jobWrites_.clear(); // what a tick that failed had not written yet is read from the queue again
    handoverSignals_.clear(); // and a signal it did not send, recorded as unsent, is asked for again
    submittedThisTick_.clear();
    // Each chain is stepped on its own: what fails for one (its data, its Slurm actions) is that chain's,
    // counted and in the end quarantined; only a database that is gone fails the whole tick.
    std::unordered_set<std::int64_t> failedThisTick;
    withdrawEarlierJobsRunningAgain(*liveChains, queue);
    for (LiveChain& live : *liveChains) {
        const ChainRow chain = live.chain;
        try {
            step(std::move(live), queue, awaiting);
            continue;
        } catch (const db::DbError& error) {
            if (!db::isChainDataError(error))
                throw; // the database is gone: the whole tick is retried
            chainFailed(chain, "data", error.what(), true);
        } catch (const SlurmError& error) {
            chainFailed(chain, "slurm", error.what(), false);
        } catch (const LeadershipLost&) {
            throw;
        } catch (const std::exception& error) {
            chainFailed(chain, "internal", error.what(), false);
        }
        failedThisTick.insert(chain.id);
    }
    sendHandoverSignals();
    // A chain whose step went through this tick starts counting its failures anew.
    std::erase_if(chainFailures_, [&](const auto& entry) { return !failedThisTick.contains(entry.first); });
    writeJobs(std::exchange(jobWrites_, {}));
    decide(awaiting, queue);
    withdrawCancelledChains(queue);
    updateGauges(now_);
    metrics_.abandonedChildren().Set(static_cast<double>(slurm::abandonedChildren()));
    pruneHistory();
}

void Provisioner::pruneHistory()
{
    if (++ticksSincePrune_ < pruneEveryTicks)
        return;
    tables_.credentials.prune(pruneBatch);
    // Retention 0 keeps the history for ever.
    const auto pruned = [&](auto& table) -> std::uint64_t {
        return config_.retentionDays == 0 ? 0 : table.prune(config_.retentionDays, pruneBatch);
    };
    const std::uint64_t events = pruned(tables_.events), decisions = pruned(tables_.decisions);
    const bool full = std::max(events, decisions) >= static_cast<std::uint64_t>(pruneBatch);
    ticksSincePrune_ = full ? pruneEveryTicks : 0;
    metrics_.pruned("events").Increment(static_cast<double>(events));
    metrics_.pruned("decisions").Increment(static_cast<double>(decisions));
}

void Provisioner::processEvents(const std::vector<EventRow>& events, const ClusterQueue& queue)
{
    // Processing an event again is harmless (each effect is keyed), so a tick that stops half-way leaves
    // its events for the next one and the marks go in one statement at the end. An event that cannot be
    // processed (out-of-range values, data the database refuses) is set aside with its reason at once:
    // it would fail every later tick the same way.
    std::vector<std::int64_t> processed;
    for (const EventRow& event : events) {
        std::optional<std::string> refused;
        try {
            processEvent(event, queue);
        } catch (const db::DbError& error) {
            if (!db::isChainDataError(error))
                throw;
            refused = error.what();
        } catch (const std::exception& error) {
            refused = error.what();
        }
        if (!refused) {
            processed.push_back(event.id);
            continue;
        }
        metrics_.chainErrors("event").Increment();
        logWarning("event " + std::to_string(event.id) + " (" + event.kind + ", job "
            + (event.slurmJobId ? std::to_string(*event.slurmJobId) : std::string("none"))
            + ") set aside: " + *refused);
        tables_.events.deadLetter(event.id, refused->substr(0, 1000));
    }
    tables_.events.markProcessed(processed);
}

// An event is a hint: the job it names is looked up in the queue, and its owner there decides which
// chain it belongs to. One read, the decision from it, then the writes.
void Provisioner::processEvent(const EventRow& row, const ClusterQueue& queue)
{
    const std::optional<PluginEvent> event = PluginEvent::stored(row);
    if (!event)
        return;
    const ClusterJob* job = queue.find(*event->jobId);
    const EventSubject subject = readEventSubject(tables_.connection(), *event->jobId,
        job ? std::optional(job->userId) : std::nullopt, event->chainName);
    std::optional<ChainRow> chain = subject.chain;
    switch (joinOf(*event, job, subject)) {
    case EventJoin::Register:
        chain = registerChain(*event, *job);
        break;
    case EventJoin::Adopt:
        adoptJob(*chain, *job);
        break;
    case EventJoin::AsRead:
        break;
    }
    if (!chain)
        return;
    const std::string& dir = event->chainDir;
    if (!chain->chainDir && !dir.empty())
        tables_.chains.setChainDir(chain->id, dir);
    if (event->checkpoint)
        tables_.checkpoints.record(
            chain->id, event->jobId, *event->checkpoint, chain->chainDir.value_or(dir));
}

// A chain begun with plain `sbatch --baton`: bound to the uid slurmctld reports.
std::optional<ChainRow> Provisioner::registerChain(const PluginEvent& event, const ClusterJob& job)
{
    // batond submits a chain's jobs as its owner: never as root or a SlurmUser, whose jobs it would then
    // run with their rights (a job of theirs with --baton runs on, without a chain).
    if (!mayOwnChains(job.userId)) {
        logWarning("chain " + event.chainName + " not registered from job " + std::to_string(job.id) + ": uid "
            + std::to_string(job.userId) + " is root or one of slurm_users, which own no chains");
        return std::nullopt;
    }
    // The cap counts these chains too; checked before the batch script is read from slurmctld, so that
    // a user over it costs the tick one count per report, not a Slurm call.
    if (config_.maxLiveChainsPerUser > 0 && tables_.chains.liveCount(job.userId) >= config_.maxLiveChainsPerUser) {
        logWarning("chain " + event.chainName + " of uid " + std::to_string(job.userId) + " not registered from job "
            + std::to_string(job.id) + ": its owner has max_live_chains_per_user live chains; the job runs "
            + "without successors");
        return std::nullopt;
    }
    std::string script;
    try {
        script = cluster_.batchScript(job.id, job.userId);
    } catch (const SlurmError& error) {
        logWarning("chain " + event.chainName + ": cannot read the batch script of job " + std::to_string(job.id)
            + " (" + error.what() + "); its successors need `batonctl resubmit`");
    }
    const std::string& dir = event.chainDir;
    ChainRow chain = tables_.chains.create(job.userId, IdentityResolver::nameOf(job.userId), event.chainName,
        dir.empty() ? std::nullopt : std::optional<std::string>(dir), specFromJob(job, script));
    const JobStore::Write first { chain.id, 0, job };
    writeJobs(std::span(&first, 1));
    logInfo("chain " + chain.ownerName + "/" + chain.name + " registered from job " + std::to_string(job.id));
    // Checked now, as `batonctl submit` checks a chain's script when it is created: a directive that
    // would make sbatch wait or submit nothing is known before the first successor is due, and the
    // owner sees why in `batonctl status` instead of a chain whose submissions fail.
    if (const auto refused = script.empty() ? std::nullopt : slurm::checkScriptDirectives(script)) {
        const std::string why = "quarantined at registration: " + *refused
            + "; batond submits no successor with this script (start the chain again from one without it)";
        if (tables_.chains.transition(chain, ChainEvent::Quarantine, why)) {
            tables_.decisions.record(chain.id, policyName(chain), "quarantine", Json { { "reason", "script" } }, why);
            logWarning("chain " + chain.ownerName + "/" + chain.name + " " + why);
        }
    }
    return chain;
}

bool Provisioner::mayOwnChains(std::int64_t uid) const
{
    if (uid == 0)
        return false;
    return std::none_of(config_.slurmUsers.begin(), config_.slurmUsers.end(),
        [&](const std::string& user) { return IdentityResolver::uidOf(user) == uid; });
}

// The owner submitted the next job by hand while the current one had ended.
void Provisioner::adoptJob(const ChainRow& chain, const ClusterJob& job)
{
    const JobStore::Write adopted { chain.id, chain.seq + 1, job };
    writeJobs(std::span(&adopted, 1));
    if (tables_.chains.advance(chain, ChainEvent::JobAdopted))
        logInfo("chain " + chain.ownerName + "/" + chain.name + ": adopted job " + std::to_string(job.id));
}

void Provisioner::writeJobs(std::span<const JobStore::Write> writes)
{
    for (const JobStore::Rejected& rejected : tables_.jobs.upsert(writes)) {
        metrics_.chainErrors("job_row").Increment();
        logError("chain " + std::to_string(rejected.chainId) + ": job row not written: " + rejected.reason);
    }
}

// A chain's step failed. A value the database refused quarantines it at once (it would fail again the
// same way); anything else (a Slurm action for it that failed) after quarantineAfterFailures ticks in a
// row. Every other chain is stepped as usual either way.
void Provisioner::chainFailed(const ChainRow& chain, std::string_view reason, const std::string& what, bool now)
{
    metrics_.chainErrors(reason).Increment();
    const std::string label = chain.ownerName + "/" + chain.name;
    logError("chain " + label + ": " + what);
    const int failures = ++chainFailures_[chain.id];
    if (!now && failures < quarantineAfterFailures)
        return;
    const std::string why = "quarantined after " + std::to_string(failures) + " failed step(s) (" + std::string(reason)
        + "): " + what.substr(0, 500);
    chainFailures_.erase(chain.id);
    if (tables_.chains.transition(chain, ChainEvent::Quarantine, why)) {
        tables_.decisions.record(chain.id, policyName(chain), "quarantine", Json { { "reason", reason } }, why);
        logWarning("chain " + label + " " + why);
    }
}

// A job of a seq the chain has moved past that runs or waits again (Slurm requeued it, or an operator ran
// `scontrol requeue` on it after it ended) would train beside the chain's current job from an old
// checkpoint: it is cancelled as its owner. Found by its idempotency key in the queue's comments, so that
// only batond's own submissions of this chain (key and token, the owner slurmctld reports) are touched.
void Provisioner::withdrawEarlierJobsRunningAgain(const std::vector<LiveChain>& chains, const ClusterQueue& queue)
{
    std::unordered_map<std::int64_t, const ChainRow*> byId;
    for (const LiveChain& live : chains)
        byId.emplace(live.chain.id, &live.chain);
    std::vector<std::pair<const ChainRow*, std::int64_t>> stale;
    for (const ClusterJob& job : queue.jobs) {
        if (job.ended() || job.comment.rfind("baton:", 0) != 0)
            continue;
        // baton:<chain id>:<seq>:<token>
        const auto idEnd = job.comment.find(':', 6);
        const auto seqEnd = idEnd == std::string::npos ? idEnd : job.comment.find(':', idEnd + 1);
        if (seqEnd == std::string::npos)
            continue;
        std::int64_t chainId = 0, seq = 0;
        try {
            chainId = std::stoll(job.comment.substr(6, idEnd - 6));
            seq = std::stoll(job.comment.substr(idEnd + 1, seqEnd - idEnd - 1));
        } catch (const std::exception&) {
            continue;
        }
        const auto chain = byId.find(chainId);
        if (chain == byId.end() || seq >= chain->second->seq || job.userId != chain->second->ownerUid
            || job.comment != Submitter::submissionKey(*chain->second, static_cast<int>(seq)))
            continue;
        stale.emplace_back(chain->second, job.id);
    }
    std::vector<OwnerAction> actions;
    for (const auto& [chain, jobId] : stale)
        actions.push_back(OwnerAction { chain->ownerUid, [this, chain, jobId] { cluster_.cancel(jobId, chain->ownerUid); },
            false, nullptr });
    runSlurmActions(actions);
    for (std::size_t i = 0; i < stale.size(); ++i) {
        const ChainRow& chain = *stale[i].first;
        const std::string what = "chain " + chain.ownerName + "/" + chain.name + ": job " + std::to_string(stale[i].second)
            + ", of a seq before its current " + std::to_string(chain.seq) + ", runs or waits again (requeued)";
        std::optional<SlurmError> failure;
        if (!actions[i].ran) // next tick
            continue;
        switch (outcomeOf(actions[i], chain, failure)) {
        case ActionOutcome::Done:
            metrics_.handovers("requeued").Increment();
            logWarning(what + "; cancelled");
            break;
        case ActionOutcome::SlurmFailed:
            metrics_.chainErrors("slurm").Increment();
            logWarning(what + "; its scancel failed (" + failure->what() + "), tried again next tick");
            slurmCallFailed(chain, *failure);
            break;
        case ActionOutcome::Settled:
            break;
        }
    }
}

Provisioner::ActionOutcome Provisioner::outcomeOf(
    const OwnerAction& action, const ChainRow& chain, std::optional<SlurmError>& failure)
{
    try {
        if (action.error)
            std::rethrow_exception(action.error);
    } catch (const SlurmError& error) {
        failure = error;
        return ActionOutcome::SlurmFailed;
    } catch (const std::exception& error) {
        chainFailed(chain, "internal", error.what(), false);
        return ActionOutcome::Settled;
    }
    slurmTimeouts_.erase(chain.id);
    return ActionOutcome::Done;
}

void Provisioner::runSlurmActions(std::vector<OwnerAction>& actions)
{
    runPerOwner(actions, slurmActionThreads, std::chrono::steady_clock::now() + config_.slurmTimeout,
        [](const std::exception_ptr& error) {
            try {
                std::rethrow_exception(error);
            } catch (const SlurmError& slurm) {
                return isTimeout(slurm);
            } catch (...) {
                return false;
            }
        });
}

void Provisioner::slurmCallFailed(const ChainRow& chain, const SlurmError& error)
{
    if (!isTimeout(error))
        return;
    const int timeouts = ++slurmTimeouts_[chain.id];
    if (timeouts < quarantineAfterFailures)
        return;
    slurmTimeouts_.erase(chain.id);
    chainFailed(chain, "slurm",
        "its Slurm calls timed out " + std::to_string(timeouts) + " times in a row (a hung working directory or a "
            + "stopped process of its owner's?): " + error.what(),
        true);
}

// Cancelled chains whose jobs may still be queued or running: cancelled as their owner until slurmctld
// shows none of them live (a scancel that failed, a successor submitted in the tick before the cancel).
void Provisioner::withdrawCancelledChains(const ClusterQueue& queue)
{
    for (const ChainStore::ToWithdraw& cancelled : tables_.chains.toWithdraw()) {
        const ChainRow& chain = cancelled.chain;
        std::map<std::int64_t, const ClusterJob*> live; // by id: a job found by its id and its key is one
        for (const std::int64_t id : cancelled.jobIds)
            if (const ClusterJob* job = queue.find(id); job && job->userId == chain.ownerUid && !job->ended())
                live.emplace(job->id, job);
        for (const std::string& key : cancelled.keys)
            if (const ClusterJob* job = queue.findByComment(key, chain.ownerUid); job && !job->ended())
                live.emplace(job->id, job);
        // A job this tick submitted is newer than the queue read at its start: looked at next tick (a
        // cancel that came while its sbatch ran would otherwise leave it running).
        const bool submittedSinceTheQueueWasRead = std::any_of(cancelled.jobIds.begin(), cancelled.jobIds.end(),
            [&](std::int64_t id) { return submittedThisTick_.contains(id) && !queue.find(id); });
        if (live.empty()) {
            if (!submittedSinceTheQueueWasRead)
                tables_.chains.setWithdrawJobs(chain.id, false);
            continue;
        }
        for (const auto& [id, job] : live) {
            try {
                cluster_.cancel(job->id, chain.ownerUid);
            } catch (const SlurmError& error) {
                metrics_.chainErrors("slurm").Increment();
                logWarning("chain " + chain.ownerName + "/" + chain.name + " (cancelled): scancel of job "
                    + std::to_string(job->id) + " failed: " + error.what() + "; tried again next tick");
            }
        }
    }
}

void Provisioner::updateGauges(std::int64_t now)
{
    struct Live {
        std::int64_t chains = 0;
        double oldestCheckpointAge = 0; // of the chains' newest checkpoints
    };
    std::map<ChainState, Live> live;
    std::vector<std::int64_t> liveIds; // in id order
    const ChainStore::LiveStates states = tables_.chains.liveStates();
    for (const auto& [id, chainState] : states.chains) {
        Live& state = live[chainState];
        ++state.chains;
        // The newest checkpoint as this tick read it: one written since (a spooled hint collected in this
        // tick's steps) counts from the next tick on; a chain that came after the read has none yet.
        if (const auto read = liveChainCache_.chains.find(id);
            read != liveChainCache_.chains.end() && read->second.rows.newestCheckpointAt)
            state.oldestCheckpointAge = std::max(
                state.oldestCheckpointAge, static_cast<double>(now) - *read->second.rows.newestCheckpointAt);
        liveIds.push_back(id);
    }
    // The ended states change only when a chain ends or a failed one is resubmitted; their count reads
    // every chain ever run, so it is taken only then. Chain ids only grow, so nothing ended or came back
    // since the last count exactly when the live chains among the ids known then are the same, and every
    // id given since is a live chain (an unused id only costs a recount).
    const std::int64_t maxId = states.maxChainId;
    const auto firstNew = std::upper_bound(liveIds.begin(), liveIds.end(), countedMaxId_.value_or(0));
    const bool countEnded = !countedMaxId_
        || !std::equal(liveIds.begin(), firstNew, liveIds_.begin(), liveIds_.end())
        || liveIds.end() - firstNew != maxId - *countedMaxId_;
    for (const auto& [state, name] : chainStateNames) {
        const Live counted = live.contains(state) ? live.at(state) : Live {};
        metrics_.checkpointAge(state).Set(counted.oldestCheckpointAge);
        if (!isTerminal(state))
            metrics_.chains(state).Set(static_cast<double>(counted.chains));
        else if (countEnded)
            metrics_.chains(state).Set(0);
    }
    if (countEnded) {
        for (const auto& [state, chains] : tables_.chains.endedCounts())
            metrics_.chains(state).Set(static_cast<double>(chains));
    }
    liveIds_ = std::move(liveIds);
    countedMaxId_ = maxId;
}

} // namespace baton::service
