#include "provisioner.hpp"

#include "identity.hpp"
#include "log.hpp"
#include "plugin_event.hpp"
#include "spool.hpp"

#include <command.hpp>
#include <errors.hpp>
#include <transaction.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
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

// Slurm states in which a job ended without the chain having made progress on purpose.
bool failedState(const std::string& state)
{
    return state == "FAILED" || state == "NODE_FAIL" || state == "OUT_OF_MEMORY" || state == "BOOT_FAIL"
        || state == "DEADLINE";
}

// Ends that slurmctld gives a job whose node failed under it or never booted: not the chain's doing.
bool nodeFailure(const std::string& state) { return state == "NODE_FAIL" || state == "BOOT_FAIL"; }

// Inside a transaction: commit it only once it is on disk, whatever the session's default.
void durable(Store& store)
{
    store.connection().execScript("SET LOCAL synchronous_commit TO on");
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

Provisioner::Provisioner(const ServiceConfig& config, Store& store, Cluster& cluster, Metrics& metrics,
    std::shared_ptr<const sim::Policy> policy, DecisionPointBuilder decisionPoint)
    : config_(config)
    , store_(store)
    , cluster_(cluster)
    , metrics_(metrics)
    , policy_(std::move(policy))
    , decisionPoint_(std::move(decisionPoint))
    , submitter_(store, cluster, metrics)
{ }

void Provisioner::tick()
{
    const ScopedTimer timer(metrics_.tick());
    // squeue and its document take the longest: the reads that do not depend on the queue run meanwhile.
    // (The Slurm calls are timed and their failures counted in one place, the live Cluster.)
    auto queueRead = std::async(std::launch::async, [this] { return cluster_.queue(); });
    // Bookkeeping (job rows, wait decisions, processed events) can be rebuilt from Slurm after a crash,
    // so it commits without waiting for the disk; the transactions that fence an action (a submission's
    // intent, a handover) turn durability back on for themselves (durable()).
    if (store_.connection().session() != bookkeepingSession_) {
        store_.connection().execScript("SET synchronous_commit TO off");
        bookkeepingSession_ = store_.connection().session();
    }
    const std::vector<EventRow> events = store_.unprocessedEvents(maxEventsPerTick);
    // Events may register chains and adopt jobs, so the live chains are read before them only when
    // there are none.
    std::optional<std::vector<LiveChain>> liveChains;
    if (events.empty())
        liveChains = store_.liveChainsForTick(liveChainCache_);
    const ClusterQueue queue = queueRead.get();
    now_ = queue.takenAt() > 0 ? queue.takenAt() : epochNow();
    processEvents(events, queue);
    if (!liveChains)
        liveChains = store_.liveChainsForTick(liveChainCache_);
    std::vector<AwaitingDecision> awaiting;
    jobWrites_.clear(); // what a tick that failed had not written yet is read from the queue again
    // Each chain is stepped on its own: what fails for one (its data, its Slurm actions) is that chain's,
    // counted and in the end quarantined; only a database that is gone fails the whole tick.
    std::unordered_set<std::int64_t> failedThisTick;
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
    const Store::Pruned pruned = store_.prune(config_.retentionDays, pruneBatch);
    const bool full = pruned.events >= static_cast<std::uint64_t>(pruneBatch)
        || pruned.decisions >= static_cast<std::uint64_t>(pruneBatch);
    ticksSincePrune_ = full ? pruneEveryTicks : 0;
    metrics_.pruned("events").Increment(static_cast<double>(pruned.events));
    metrics_.pruned("decisions").Increment(static_cast<double>(pruned.decisions));
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
        store_.deadLetter(event.id, refused->substr(0, 1000));
    }
    store_.markProcessed(processed);
}

// An event is a hint: the job it names is looked up in the queue, and its owner there decides which
// chain it belongs to.
void Provisioner::processEvent(const EventRow& row, const ClusterQueue& queue)
{
    const std::optional<PluginEvent> event = PluginEvent::stored(row);
    if (!event)
        return;
    const ClusterJob* job = queue.find(*event->jobId);
    const std::string& dir = event->chainDir;
    std::int64_t knownChain = 0;
    const auto knownJob = store_.jobBySlurmId(*event->jobId, &knownChain);
    std::optional<ChainRow> chain;
    if (knownJob) {
        chain = store_.chain(knownChain);
    } else if (job) {
        chain = store_.chain(job->userId, event->chainName);
        if (!chain && event->kind == "step_start") {
            // A chain begun with plain `sbatch --baton`: bound to the uid slurmctld reports.
            std::string script;
            try {
                script = cluster_.batchScript(job->id, job->userId);
            } catch (const SlurmError& error) {
                logWarning("chain " + event->chainName + ": cannot read the batch script of job "
                    + std::to_string(job->id) + " (" + error.what()
                    + "); its successors need `batonctl resubmit`");
            }
            chain = store_.createChain(job->userId, IdentityResolver::nameOf(job->userId), event->chainName,
                dir.empty() ? std::nullopt : std::optional<std::string>(dir), specFromJob(*job, script));
            const Store::JobWrite first { chain->id, 0, *job };
            writeJobs(std::span(&first, 1));
            logInfo("chain " + chain->ownerName + "/" + chain->name + " registered from job "
                + std::to_string(job->id));
        } else if (chain && isAllowed(chain->state, ChainEvent::JobAdopted) && event->kind == "step_start"
            && job->comment.rfind("baton:", 0) != 0) {
            // The owner submitted the next job by hand while the current one had ended.
            const auto jobs = store_.jobs(chain->id);
            const auto current = std::find_if(jobs.begin(), jobs.end(),
                [&](const JobRow& j) { return j.seq == chain->seq && !j.withdrawn; });
            const bool currentEnded = current == jobs.end() || current->endTime.has_value();
            const auto next = store_.submission(chain->id, chain->seq + 1);
            if (currentEnded && (!next || next->state == "failed" || next->state == "cancelled")) {
                const Store::JobWrite adopted { chain->id, chain->seq + 1, *job };
                writeJobs(std::span(&adopted, 1));
                if (store_.advance(*chain, ChainEvent::JobAdopted))
                    logInfo("chain " + chain->ownerName + "/" + chain->name + ": adopted job "
                        + std::to_string(job->id));
            }
        }
    }
    if (!chain)
        return;
    if (!chain->chainDir && !dir.empty())
        store_.setChainDir(chain->id, dir);
    if (event->checkpoint)
        store_.recordCheckpoint(chain->id, event->jobId, *event->checkpoint, chain->chainDir.value_or(dir));
}

void Provisioner::writeJobs(std::span<const Store::JobWrite> writes)
{
    for (const Store::RejectedJob& rejected : store_.upsertJobs(writes)) {
        metrics_.chainErrors("job_row").Increment();
        logError("chain " + std::to_string(rejected.chainId) + ": job row not written: " + rejected.reason);
    }
}

std::optional<ClusterJob> Provisioner::refreshJob(const ChainRow& chain, int seq, const ClusterQueue& queue,
    const std::vector<JobRow>& jobs, const std::optional<SubmissionRow>& submission)
{
    std::optional<std::int64_t> jobId;
    if (submission && submission->slurmJobId)
        jobId = submission->slurmJobId;
    if (submission && submission->state == "intent") {
        if (const ClusterJob* found = queue.findByComment(submission->key, chain.ownerUid)) {
            // sbatch succeeded but batond stopped before it wrote the job id down.
            store_.markSubmitted(submission->key, found->id);
            jobId = found->id;
            logInfo("chain " + chain.ownerName + "/" + chain.name + ": found submission " + submission->key
                + " as job " + std::to_string(found->id));
        } else if (now_ - submission->createdAt >= config_.submitGrace.count() || submission->reason == "restart") {
            // An intent the API recorded for the tick (a restart: no sbatch of it in flight) goes at once.
            jobId = submitter_.submitRecorded(chain, seq);
            if (!jobId)
                return std::nullopt;
        } else {
            return std::nullopt; // a submission may be in flight
        }
    }
    // The row of this job, else the seq's row that still holds it (a withdrawn one gave the seq back).
    auto row = std::find_if(jobs.begin(), jobs.end(),
        [&](const JobRow& job) { return job.seq == seq && jobId && job.slurmJobId == *jobId; });
    if (row == jobs.end())
        row = std::find_if(
            jobs.begin(), jobs.end(), [seq](const JobRow& job) { return job.seq == seq && !job.withdrawn; });
    if (!jobId && row != jobs.end())
        jobId = row->slurmJobId;
    if (!jobId)
        return std::nullopt;
    if (const ClusterJob* found = queue.find(*jobId)) {
        recordJob(chain, seq, *found, jobs);
        return *found;
    }
    if (row == jobs.end() || row->slurmJobId != *jobId)
        return std::nullopt;
    // Gone from squeue (older than MinJobAge): what the database last saw, ended now if it was live.
    ClusterJob job;
    job.id = row->slurmJobId;
    job.userId = chain.ownerUid;
    job.state = row->state;
    job.submitTime = row->submitTime.value_or(0);
    job.startTime = row->startTime.value_or(0);
    job.endTime = row->endTime.value_or(0);
    job.timeLimitSeconds = row->timeLimitSeconds.value_or(0);
    job.exitCode = row->exitCode;
    if (!job.ended()) {
        job.state = "UNKNOWN";
        job.endTime = std::max(now_, job.startTime);
        jobWrites_.push_back(Store::JobWrite { chain.id, seq, job });
    }
    return job;
}

// Most ticks change nothing about most jobs: a row is written only when slurmctld's facts changed, and
// with the other chains' after their steps.
void Provisioner::recordJob(
    const ChainRow& chain, int seq, const ClusterJob& job, const std::vector<JobRow>& jobs)
{
    const auto known
        = [](std::int64_t value) { return value > 0 ? std::optional<std::int64_t>(value) : std::nullopt; };
    const auto row = std::find_if(
        jobs.begin(), jobs.end(), [&](const JobRow& r) { return r.seq == seq && r.slurmJobId == job.id; });
    if (row != jobs.end() && row->state == job.state && row->submitTime == known(job.submitTime)
        && row->startTime == known(job.startTime) && row->endTime == known(job.endTime)
        && row->timeLimitSeconds == known(job.timeLimitSeconds) && row->exitCode == job.exitCode
        && row->withdrawn == job.withdrawn())
        return;
    jobWrites_.push_back(Store::JobWrite { chain.id, seq, job });
}

// The compare-and-set and the intent go in one transaction, before sbatch runs.
bool Provisioner::startSubmission(
    const ChainRow& chain, const std::string& reason, const Json& inputs, const ClusterQueue& queue)
{
    std::vector<SubmissionStart> one { SubmissionStart { &chain, reason, inputs } };
    return startSubmissions(one, queue) == 1;
}

// The intents of all the chains that submit in this tick are written in one statement and made durable
// together with the tick's decision rows (one flush to disk, however many chains reached their lead at
// once), before any sbatch runs.
std::size_t Provisioner::startSubmissions(
    std::span<const SubmissionStart> starts, const ClusterQueue& queue, std::vector<DecisionInput> decisions)
{
    if (starts.empty()) {
        store_.recordDecisions(config_.policy, decisions);
        return 0;
    }
    std::unordered_map<std::int64_t, Store::RecordedIntent> specs; // of the chains whose intent was written
    {
        std::vector<IntentRequest> requests;
        for (const SubmissionStart& start : starts) {
            if (!isAllowed(start.chain->state, ChainEvent::SubmitSuccessor))
                continue;
            const int seq = start.chain->seq + 1;
            requests.push_back(IntentRequest {
                start.chain->id, start.chain->state, seq, Submitter::submissionKey(*start.chain, seq), start.reason });
        }
        db::Transaction transaction(store_.connection());
        durable(store_);
        specs = store_.recordIntents(requests);
        for (const SubmissionStart& start : starts)
            if (specs.contains(start.chain->id))
                decisions.push_back(DecisionInput { start.chain->id, "submit", start.inputs, start.reason });
        store_.recordDecisions(config_.policy, decisions);
        transaction.commit();
    }
    std::vector<SubmittedJob> submitted;
    for (const SubmissionStart& start : starts) {
        const ChainRow& chain = *start.chain;
        const auto spec = specs.find(chain.id);
        if (spec == specs.end())
            continue;
        const int seq = chain.seq + 1;
        const std::string& key = spec->second.key;
        const auto predicted = start.inputs.find("predicted_wait_s");
        const std::optional<double> predictedWait = predicted != start.inputs.end() && predicted->is_number()
            ? std::optional(predicted->get<double>())
            : std::nullopt;
        // An earlier sbatch of this key may have been accepted after its answer was lost (a timeout):
        // slurmctld's queue says so, and then that job is the one.
        if (const ClusterJob* found = queue.findByComment(key, chain.ownerUid); found && !found->withdrawn()) {
            logInfo("chain " + chain.ownerName + "/" + chain.name + ": " + key + " is already job "
                + std::to_string(found->id) + "; not submitted again");
            submitted.push_back(SubmittedJob { key, chain.id, found->id, predictedWait });
            continue;
        }
        try {
            if (const auto jobId = submitter_.submitIntent(chain, seq, key, start.reason, spec->second.spec))
                submitted.push_back(SubmittedJob { key, chain.id, *jobId, predictedWait });
        } catch (const db::DbError& error) {
            if (!db::isChainDataError(error))
                throw;
            // The intent stays: the next tick reconciles it against the queue or submits it again.
            chainFailed(chain, "data", error.what(), false);
        } catch (const LeadershipLost&) {
            throw;
        } catch (const std::exception& error) {
            chainFailed(chain, "internal", error.what(), false);
        }
    }
    store_.recordSubmitted(submitted);
    return specs.size();
}

void Provisioner::collectSpoolHints(const ChainRow& chain)
{
    if (!chain.chainDir)
        return;
    try {
        for (const std::string& line : collectSpool(*chain.chainDir, chain.ownerUid)) {
            try {
                if (const auto event = PluginEvent::spooled(line, config_.maxJsonDepth))
                    store_.recordCheckpoint(chain.id, event->jobId, *event->checkpoint, *chain.chainDir);
            } catch (const std::invalid_argument&) {
                // a damaged line of the owner's own file: skipped
            } catch (const db::DbError& error) {
                if (!db::isChainDataError(error))
                    throw;
                // a line whose values the database refused: skipped, like a damaged one
            }
        }
    } catch (const std::runtime_error& error) {
        if (dynamic_cast<const db::DbError*>(&error))
            throw;
        logWarning("chain " + chain.ownerName + "/" + chain.name + ": " + error.what());
    }
}

void Provisioner::onCurrentEnded(const ChainRow& chain, const ClusterJob& current, const ClusterQueue& queue)
{
    collectSpoolHints(chain);
    if (store_.trainingDone(chain.id)) {
        if (store_.transition(chain, ChainEvent::TrainingDone, "training finished")) {
            store_.recordDecision(
                chain.id, config_.policy, "finish", Json { { "job_id", current.id } }, "finished");
            logInfo("chain " + chain.ownerName + "/" + chain.name + " finished");
        }
        return;
    }
    if (current.state == "CANCELLED" && !chain.resubmitRequested && !store_.pausedForJob(chain.id, current.id)) {
        // Someone cancelled the job by hand: stop the chain until its owner says otherwise (a resume or
        // resubmit of it asks for the next job, and is not stopped again by the same cancelled job, also
        // when the job it asked for is withdrawn in turn: the chain then submits another).
        if (store_.transition(chain, ChainEvent::JobCancelledOutside,
                "job " + std::to_string(current.id) + " was cancelled outside baton"))
            store_.recordDecision(
                chain.id, config_.policy, "pause", Json { { "job_id", current.id } }, "job cancelled");
        return;
    }
    std::string reason = chain.resubmitRequested ? "resubmit" : "reactive";
    // Progress: the job committed a checkpoint; a job that did resets the retry count.
    const auto newest = store_.latestCheckpoint(chain.id);
    const bool progressed = newest && newest->value("job_id", Json()).is_number()
        && (*newest)["job_id"].get<std::int64_t>() == current.id;
    if (progressed && chain.retries > 0)
        store_.setRetries(chain.id, 0);
    // The plugin reports a job's last checkpoint as its tasks exit, just before the job ends, but batond
    // may see the end in squeue before it has processed that report: a job without a recorded checkpoint
    // is judged one tick period after its end, not before.
    const auto tickSeconds = std::chrono::ceil<std::chrono::seconds>(config_.tick).count();
    if (!progressed && !chain.resubmitRequested && current.endTime > 0 && now_ - current.endTime < tickSeconds)
        return;
    // A node that failed under the job is no fault of the chain's: its successor (on another node:
    // slurmctld gives none to a node that is down) does not spend the retry budget. A job that was
    // itself such a successor and failed its node again without a checkpoint does: a job that brings
    // its node down each time is stopped.
    const auto afterNodeFailure = [&] { // read only for a job that lost its node
        const auto submitted = store_.submission(chain.id, chain.seq);
        return submitted && submitted->reason == "node_failure";
    };
    if (!progressed && nodeFailure(current.state) && !chain.resubmitRequested && !afterNodeFailure()) {
        reason = "node_failure";
    } else if (!progressed) {
        // A job that ended without committing a checkpoint made no progress, whatever Slurm calls its
        // end (a script that exits at once "completes" too): those spend the retry budget, so that a
        // broken chain stops with a reason instead of submitting forever.
        if (chain.retries >= config_.retryBudget && !chain.resubmitRequested) {
            const std::string why = "job " + std::to_string(current.id) + " ended (" + current.state
                + ") without a checkpoint; retry budget of " + std::to_string(config_.retryBudget) + " spent";
            if (store_.transition(chain, ChainEvent::RetryBudgetSpent, why)) {
                store_.recordDecision(
                    chain.id, config_.policy, "fail", Json { { "job_id", current.id } }, why);
                logWarning("chain " + chain.ownerName + "/" + chain.name + " failed: " + why);
            }
            return;
        }
        store_.setRetries(chain.id, chain.retries + 1);
        if (failedState(current.state) && !chain.resubmitRequested)
            reason = "retry";
    }
    startSubmission(chain, reason,
        Json { { "predecessor_job_id", current.id }, { "predecessor_state", current.state } }, queue);
}

// A successor that is not to run (its chain was paused, or the training finished) is cancelled and its
// submission marked so; false while that cannot be done yet: an intent without a job may still be in
// sbatch (it waits for the grace), and a paused chain's successor that already runs holds the training.
bool Provisioner::withdrawSuccessor(const ChainRow& chain, const std::optional<SubmissionRow>& next,
    const ClusterQueue& queue, const std::string& why, bool evenIfStarted)
{
    if (!next || (next->state != "intent" && next->state != "submitted"))
        return true;
    const ClusterJob* job = next->slurmJobId ? queue.find(*next->slurmJobId) : queue.findByComment(next->key, chain.ownerUid);
    if (job && job->started() && !evenIfStarted)
        return false; // it runs: the training is its now
    if (!job && next->state == "intent" && now_ - next->createdAt < config_.submitGrace.count())
        return false;
    if (job && !job->ended()) {
        cluster_.cancel(job->id, chain.ownerUid);
    }
    store_.markSubmission(chain.id, chain.seq + 1, "cancelled", why);
    return true;
}

// Signals the predecessor of a handover to checkpoint and exit; recorded only once scancel delivered it,
// so that a failed scancel, or a batond stopped between the handover's commit and the signal, is sent
// again by the next tick.
void Provisioner::signalHandover(const ChainRow& chain, const ClusterJob& current)
{
    const SignalScope scope = store_.checkpointSignalScope(current.id);
    try {
        cluster_.signal(current.id, "TERM", scope, chain.ownerUid);
    } catch (const SlurmError& error) {
        metrics_.chainErrors("slurm").Increment();
        logWarning("chain " + chain.ownerName + "/" + chain.name + ": the handover signal to job "
            + std::to_string(current.id) + " failed (" + error.what() + "); sent again next tick");
        return;
    }
    store_.recordHandoverSignal(chain.id, chain.seq, now_);
    logInfo("chain " + chain.ownerName + "/" + chain.name + ": job " + std::to_string(current.id)
        + " asked to checkpoint and exit (" + (scope == SignalScope::Steps ? "its srun steps" : "batch shell and steps")
        + ")");
}

void Provisioner::withdrawRequeued(const ChainRow& chain, const ClusterJob& job, const std::string& why)
{
    logInfo("chain " + chain.ownerName + "/" + chain.name + ": job " + std::to_string(job.id)
        + " was requeued by Slurm while " + why + "; cancelling it");
    metrics_.handovers("requeued").Increment();
    cluster_.cancel(job.id, chain.ownerUid);
}

void Provisioner::step(LiveChain live, const ClusterQueue& queue, std::vector<AwaitingDecision>& awaiting)
{
    const ChainRow& chain = live.chain;
    if (chain.state == ChainState::Quarantined)
        return; // nothing is done for it until its owner or an operator resumes, resubmits or cancels it
    const auto current = refreshJob(chain, chain.seq, queue, live.jobs, live.current);
    if (chain.state == ChainState::Paused) {
        // Paused means no job after the current one: a successor not yet running is withdrawn.
        withdrawSuccessor(chain, live.next, queue, "chain paused", false);
        return;
    }
    // Only a submission still meant to run has a successor: a cancelled or failed one's job is history.
    const bool nextLive = live.next && (live.next->state == "intent" || live.next->state == "submitted");
    const auto successor
        = nextLive ? refreshJob(chain, chain.seq + 1, queue, live.jobs, live.next) : std::nullopt;
    const std::string label = chain.ownerName + "/" + chain.name;
    switch (chain.state) {
    case ChainState::Paused:
    case ChainState::Quarantined:
        return; // handled above
    case ChainState::Running: {
        if (!current) {
            if (live.current && live.current->state == "failed"
                && store_.transition(chain, ChainEvent::RetryBudgetSpent,
                    "sbatch refused job " + std::to_string(chain.seq) + ": " + live.current->error))
                logWarning("chain " + label + " failed: sbatch refused its job: " + live.current->error);
            return; // else the first submission is still being recorded
        }
        if (successor && !successor->withdrawn()) { // a successor exists (e.g. the chain was resumed)
            store_.transition(chain, ChainEvent::SuccessorFound);
            return;
        }
        if (current->ended()) {
            onCurrentEnded(chain, *current, queue);
            return;
        }
        if (live.trainingDone)
            return; // the training is complete: this job only exits, nothing follows it
        if (chain.resubmitRequested) {
            startSubmission(chain, "resubmit", Json { { "requested", true } }, queue);
            return;
        }
        if (!current->running() || current->timeLimitSeconds <= 0)
            return;
        awaiting.push_back(AwaitingDecision { chain, *current });
        return;
    }
    case ChainState::SuccessorPending: {
        if (current && current->ended())
            collectSpoolHints(chain);
        if (current && current->ended() && store_.trainingDone(chain.id)) {
            if (!withdrawSuccessor(chain, live.next, queue, "training finished", true))
                return; // an intent that may still be in sbatch: judged next tick
            if (store_.transition(chain, ChainEvent::TrainingDone, "training finished")) {
                store_.recordDecision(
                    chain.id, config_.policy, "finish", Json::object(), "pending successor cancelled");
                logInfo("chain " + label + " finished; its pending successor was cancelled");
            }
            return;
        }
        if (!successor) {
            // sbatch failed (or the submission went away): back to running, which submits anew.
            if (!nextLive && store_.transition(chain, ChainEvent::SuccessorWithdrawn))
                logInfo("chain " + label + ": its successor's submission "
                    + (live.next ? live.next->state + (live.next->error.empty() ? "" : " (" + live.next->error + ")")
                                 : std::string("is missing"))
                    + "; it is submitted again");
            return;
        }
        if (successor->withdrawn()) {
            // Ended without running (cancelled while queued, or refused): it never held the training,
            // so the predecessor goes on; back to running, which submits anew when the policy says so.
            store_.markSubmission(chain.id, chain.seq + 1, "cancelled", "job ended without running: " + successor->state);
            if (store_.transition(chain, ChainEvent::SuccessorWithdrawn))
                store_.recordDecision(chain.id, config_.policy, "withdrawn",
                    Json { { "successor_job_id", successor->id }, { "successor_state", successor->state } },
                    "successor ended without running");
            return;
        }
        if (!successor->started())
            return; // still queued
        if (const auto predicted = store_.resolvePrediction(
                successor->id, static_cast<double>(successor->startTime - successor->submitTime)))
            metrics_.predictionError().Observe(
                std::abs(*predicted - static_cast<double>(successor->startTime - successor->submitTime)));
        if (current && current->pending()) {
            // Slurm requeued the predecessor (its node failed, or an operator asked): the successor,
            // which restores the newest checkpoint, carries the chain on; the queued copy of the
            // predecessor would train a second time beside it. Ended next tick, it is then passed.
            withdrawRequeued(chain, *current, "its successor " + std::to_string(successor->id) + " runs");
            return;
        }
        if (current && !current->ended()) {
            // The successor runs while its predecessor does: fence the handover, then signal.
            const char* reached = store_.checkpointSignalScope(current->id) == SignalScope::Steps ? "steps" : "full";
            {
                db::Transaction transaction(store_.connection());
                durable(store_);
                if (!store_.transition(chain, ChainEvent::SuccessorStarted))
                    return;
                store_.setGeneration(chain.id, chain.seq);
                store_.startHandover(chain.id, chain.seq, current->id, successor->id, now_);
                store_.recordDecision(chain.id, config_.policy, "handover",
                    Json { { "predecessor_job_id", current->id }, { "successor_job_id", successor->id },
                        { "signal_scope", reached } },
                    std::string("predecessor signalled TERM (") + reached + ")");
                transaction.commit();
            }
            metrics_.handovers("started").Increment();
            logInfo("chain " + label + ": job " + std::to_string(successor->id) + " started while job "
                + std::to_string(current->id) + " runs: handover");
            signalHandover(chain, *current);
            return;
        }
        // The predecessor had ended already: the chain waited for its successor.
        if (current && current->endTime > 0)
            metrics_.interruption().Observe(
                static_cast<double>(std::max<std::int64_t>(0, successor->startTime - current->endTime)));
        store_.advance(chain, ChainEvent::PredecessorEnded);
        return;
    }
    case ChainState::Handover: {
        if (current && current->ended()) {
            const std::int64_t end = current->endTime > 0 ? current->endTime : now_;
            {
                db::Transaction transaction(store_.connection());
                const auto seconds = store_.completeHandover(chain.id, chain.seq, end);
                if (!store_.advance(chain, ChainEvent::PredecessorEnded))
                    return;
                transaction.commit();
                if (seconds)
                    metrics_.handoverDuration().Observe(*seconds);
            }
            metrics_.handovers("completed").Increment();
            if (successor && successor->startTime > 0)
                metrics_.overlap().Observe(
                    static_cast<double>(std::max<std::int64_t>(0, end - successor->startTime)));
            if (store_.trainingDone(chain.id) && current->state == "COMPLETED") {
                // The handover checkpoint was the last one: nothing left for the successor to do. It
                // resumes, sees the done checkpoint and exits; the chain finishes with it.
                logInfo("chain " + label + ": training finished during a handover");
            }
            return;
        }
        if (!current)
            return;
        if (current->pending()) { // requeued during the handover: see SuccessorPending
            withdrawRequeued(chain, *current, "the handover to its successor is under way");
            return;
        }
        if (!store_.handoverSignal(chain.id, chain.seq).sentAt) {
            signalHandover(chain, *current);
            return;
        }
        const auto signalled = store_.handoverSignalledAt(chain.id, chain.seq);
        if (signalled && now_ - *signalled > config_.handoverTimeout.count()) {
            logWarning("chain " + label + ": job " + std::to_string(current->id) + " did not exit within "
                + std::to_string(config_.handoverTimeout.count())
                + " s of the handover signal; cancelling it");
            metrics_.handovers("timed_out").Increment();
            cluster_.cancel(current->id, chain.ownerUid);
        }
        return;
    }
    case ChainState::Finished:
    case ChainState::Failed:
    case ChainState::Cancelled:
        return;
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
    if (store_.transition(chain, ChainEvent::Quarantine, why)) {
        store_.recordDecision(chain.id, config_.policy, "quarantine", Json { { "reason", reason } }, why);
        logWarning("chain " + label + " " + why);
    }
}

// Cancelled chains whose jobs may still be queued or running: cancelled as their owner until slurmctld
// shows none of them live (a scancel that failed, a successor submitted in the tick before the cancel).
void Provisioner::withdrawCancelledChains(const ClusterQueue& queue)
{
    for (const Store::ChainToWithdraw& cancelled : store_.chainsToWithdraw()) {
        const ChainRow& chain = cancelled.chain;
        std::map<std::int64_t, const ClusterJob*> live; // by id: a job found by its id and its key is one
        for (const std::int64_t id : cancelled.jobIds)
            if (const ClusterJob* job = queue.find(id); job && job->userId == chain.ownerUid && !job->ended())
                live.emplace(job->id, job);
        for (const std::string& key : cancelled.keys)
            if (const ClusterJob* job = queue.findByComment(key, chain.ownerUid); job && !job->ended())
                live.emplace(job->id, job);
        if (live.empty()) {
            store_.setWithdrawJobs(chain.id, false);
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

void Provisioner::decide(std::vector<AwaitingDecision>& awaiting, const ClusterQueue& queue)
{
    std::vector<ClusterJob> current;
    current.reserve(awaiting.size());
    for (const AwaitingDecision& a : awaiting)
        current.push_back(a.current);
    const std::vector<sim::DecisionPoint> points = awaiting.empty()
        ? std::vector<sim::DecisionPoint>()
        : decisionPoint_(queue, std::span<const ClusterJob>(current), now_);
    std::vector<DecisionInput> waits;
    std::vector<SubmissionStart> submissions;
    std::unordered_map<std::int64_t, std::int64_t> waitSlots; // of the chains still waiting
    for (std::size_t i = 0; i < awaiting.size(); ++i) {
        const ChainRow& chain = awaiting[i].chain;
        const sim::DecisionPoint& point = points.at(i);
        try {
            // The lead is a floor under every policy but reactive: sbatch and the scheduler's next cycle
            // take time, and a successor submitted at the last second always leaves a gap. It takes at
            // most half of a job's limit: on a free cluster the successor starts at once and the job
            // hands over, so a lead near the limit would end each job of a short-limit chain before it
            // has trained, and its successor's the same way.
            const std::int64_t limit = awaiting[i].current.timeLimitSeconds;
            const std::int64_t lead = limit > 0
                ? std::min<std::int64_t>(config_.submitLead.count(), limit / 2)
                : config_.submitLead.count();
            const bool submit
                = policy_->submitNow(point) || (config_.policy != "reactive" && point.remaining <= lead);
            // What the decision row says the policy saw; built only for the rows that are written.
            const auto inputs = [&] {
                Json seen { { "remaining_s", point.remaining },
                    { "recent_mean_wait_s", point.recentMeanWait }, { "queue_pending", point.features[2] },
                    { "queue_ahead", point.features[4] }, { "free_nodes", point.features[8] } };
                // What the policy expects the successor to wait: the model's, or avg's recent mean.
                if (std::isfinite(point.meanLogWait))
                    seen["predicted_wait_s"] = std::expm1(point.meanLogWait);
                else if (config_.policy != "reactive")
                    seen["predicted_wait_s"] = point.recentMeanWait;
                return seen;
            };
            if (submit) {
                submissions.push_back(SubmissionStart { &chain, "policy", inputs() });
                continue;
            }
            const std::int64_t slot = (now_ + waitRecordPhase(chain.id)) / waitRecordSeconds;
            waitSlots.emplace(chain.id, slot);
            if (const auto last = waitSlot_.find(chain.id); last != waitSlot_.end() && last->second == slot)
                continue;
            waits.push_back(DecisionInput { chain.id, "wait", inputs(), "" });
        } catch (const db::DbError&) {
            throw;
        } catch (const std::exception& error) {
            logError("chain " + chain.ownerName + "/" + chain.name + ": " + error.what());
        }
    }
    waitSlot_ = std::move(waitSlots);
    startSubmissions(submissions, queue, std::move(waits));
}

void Provisioner::updateGauges(std::int64_t now)
{
    struct Live {
        std::int64_t chains = 0;
        double oldestCheckpointAge = 0; // of the chains' newest checkpoints
    };
    std::map<ChainState, Live> live;
    std::vector<std::int64_t> liveIds; // in id order
    const Store::LiveStates states = store_.liveStates();
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
        for (const auto& [state, chains] : store_.endedCounts())
            metrics_.chains(state).Set(static_cast<double>(chains));
    }
    liveIds_ = std::move(liveIds);
    countedMaxId_ = maxId;
}

} // namespace baton::service
