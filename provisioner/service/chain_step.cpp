#include "provisioner.hpp"

#include "log.hpp"
#include "plugin_event.hpp"
#include "owner_files.hpp"

#include "db/errors.hpp"
#include "db/transaction.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace baton::service {

namespace {

using Json = nlohmann::json;

// Slurm states in which a job ended without the chain having made progress on purpose.
bool failedState(const std::string& state)
{
    return state == "FAILED" || state == "NODE_FAIL" || state == "OUT_OF_MEMORY" || state == "BOOT_FAIL"
        || state == "DEADLINE";
}

// Ends that slurmctld gives a job whose node failed under it or never booted: not the chain's doing.
bool nodeFailure(const std::string& state) { return state == "NODE_FAIL" || state == "BOOT_FAIL"; }

// A submission still meant to run: a cancelled or failed one's job is history.
bool isLive(const std::optional<SubmissionRow>& submission)
{
    return submission && (submission->state == "intent" || submission->state == "submitted");
}

} // namespace

std::optional<ClusterJob> Provisioner::refreshJob(const ChainRow& chain, int seq, const ClusterQueue& queue,
    const std::vector<JobRow>& jobs, const std::optional<SubmissionRow>& submission)
{
    std::optional<std::int64_t> jobId;
    if (submission && submission->slurmJobId)
        jobId = submission->slurmJobId;
    if (submission && submission->state == "intent") {
        if (const ClusterJob* found = queue.findByComment(submission->key, chain.ownerUid)) {
            // sbatch succeeded but batond stopped before it wrote the job id down.
            tables_.submissions.markSubmitted(submission->key, found->id);
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
        jobWrites_.push_back(JobStore::Write { chain.id, seq, job });
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
    jobWrites_.push_back(JobStore::Write { chain.id, seq, job });
}

// Checkpoint hints the plugin spooled while batond was unreachable; the step's view of the chain takes in
// what they add (training done, a newer checkpoint), so that nothing is read back. The plugin spools only
// while the job's tasks run: read once each time the chain's current job has ended (per seq), however
// many ticks the chain then waits for its successor, whether the reading went through or not; of what was
// read, the newest maxSpoolLines lines at most.
void Provisioner::collectSpoolHints(LiveChain& live)
{
    const ChainRow& chain = live.chain;
    if (!chain.chainDir)
        return;
    if (const auto read = spoolRead_.find(chain.id); read != spoolRead_.end() && read->second == chain.seq)
        return;
    spoolRead_[chain.id] = chain.seq;
    try {
        std::vector<std::string> lines = collectSpool(*chain.chainDir, chain.ownerUid, maxSpoolBytes);
        if (lines.size() > maxSpoolLines)
            lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(maxSpoolLines));
        for (const std::string& line : lines) {
            try {
                const auto event = PluginEvent::spooled(line, config_.maxJsonDepth);
                if (!event)
                    continue;
                const auto recorded
                    = tables_.checkpoints.record(chain.id, event->jobId, *event->checkpoint, *chain.chainDir);
                live.trainingDone = live.trainingDone || recorded.trainingDone;
                if (recorded.iteration > live.newestCheckpointIteration.value_or(-1)) {
                    live.newestCheckpointIteration = recorded.iteration;
                    live.newestCheckpointJob = recorded.writerJobId;
                }
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

// A successor submitted while its predecessor ran waits up to BATON_HANDOVER_WAIT for the predecessor's
// final checkpoint. Once slurmctld says the predecessor ended (its node failed, it crashed, it finished),
// whatever it wrote is committed and nothing more will come: the marker ends that wait within a poll
// instead of at its bound. Written once per seq; a failure is tried again next tick while the successor
// still waits, and costs only the wait it would have shortened.
void Provisioner::markPredecessorEnded(const ChainRow& chain, const ClusterJob& predecessor)
{
    if (!chain.chainDir)
        return;
    if (const auto marked = endMarked_.find(chain.id); marked != endMarked_.end() && marked->second == chain.seq)
        return;
    // Tried once per seq, written or not: a chain directory that hangs costs one timeout, not one a tick.
    endMarked_[chain.id] = chain.seq;
    const Json marker { { "version", 1 }, { "seq", chain.seq }, { "job_id", predecessor.id },
        { "state", predecessor.state }, { "time_unix", predecessor.endTime > 0 ? predecessor.endTime : now_ } };
    try {
        writeHandoverFile(*chain.chainDir, chain.ownerUid, HandoverFile::Ended, marker.dump());
    } catch (const std::runtime_error& error) {
        metrics_.chainErrors("owner_files").Increment();
        logWarning("chain " + chain.ownerName + "/" + chain.name + ": " + error.what()
            + "; its successor waits for a final checkpoint up to its bound");
    }
}

void Provisioner::onCurrentEnded(LiveChain& live, const ClusterJob& current, const ClusterQueue& queue)
{
    const ChainRow& chain = live.chain;
    collectSpoolHints(live);
    if (live.trainingDone) {
        if (tables_.chains.transition(chain, ChainEvent::TrainingDone, "training finished")) {
            tables_.decisions.record(
                chain.id, policyName(chain), "finish", Json { { "job_id", current.id } }, "finished");
            logInfo("chain " + chain.ownerName + "/" + chain.name + " finished");
        }
        return;
    }
    if (current.state == "CANCELLED" && !chain.resubmitRequested
        && !tables_.decisions.pausedForJob(chain.id, current.id)) {
        // Someone cancelled the job by hand: stop the chain until its owner says otherwise (a resume or
        // resubmit of it asks for the next job, and is not stopped again by the same cancelled job, also
        // when the job it asked for is withdrawn in turn: the chain then submits another).
        if (tables_.chains.transition(chain, ChainEvent::JobCancelledOutside,
                "job " + std::to_string(current.id) + " was cancelled outside baton"))
            tables_.decisions.record(
                chain.id, policyName(chain), "pause", Json { { "job_id", current.id } }, "job cancelled");
        return;
    }
    std::string reason = chain.resubmitRequested ? "resubmit" : "reactive";
    // Progress: the job committed a checkpoint; a job that did resets the retry count.
    const bool progressed = live.newestCheckpointJob == current.id;
    if (progressed && chain.retries > 0)
        tables_.chains.setRetries(chain.id, 0);
    // The plugin reports a job's last checkpoint as its tasks exit, just before the job ends, but batond
    // may see the end in squeue before it has processed that report: a job without a recorded checkpoint
    // is judged one tick period after its end, not before.
    const auto tickSeconds = std::chrono::ceil<std::chrono::seconds>(config_.tick).count();
    if (!progressed && !chain.resubmitRequested && current.endTime > 0 && now_ - current.endTime < tickSeconds)
        return;
    // A node that failed under the job is no fault of the chain's: its successor (on another node:
    // slurmctld gives none to a node that is down) does not spend the retry budget. Only the first such
    // failure since the chain's last progress is free: a job that was itself such a successor, or one after
    // a charged retry, and failed its node again without a checkpoint spends it, so that a job that brings
    // its node down each time is stopped after retry_budget more nodes, not twice as many.
    const bool afterNodeFailure = live.current && live.current->reason == "node_failure";
    if (!progressed && nodeFailure(current.state) && !chain.resubmitRequested && !afterNodeFailure
        && chain.retries == 0) {
        reason = "node_failure";
    } else if (!progressed) {
        // A job that ended without committing a checkpoint made no progress, whatever Slurm calls its
        // end (a script that exits at once "completes" too): those spend the retry budget, so that a
        // broken chain stops with a reason instead of submitting forever.
        if (chain.retries >= config_.retryBudget && !chain.resubmitRequested) {
            const std::string why = "job " + std::to_string(current.id) + " ended (" + current.state
                + ") without a checkpoint; retry budget of " + std::to_string(config_.retryBudget) + " spent";
            if (tables_.chains.transition(chain, ChainEvent::RetryBudgetSpent, why)) {
                tables_.decisions.record(
                    chain.id, policyName(chain), "fail", Json { { "job_id", current.id } }, why);
                logWarning("chain " + chain.ownerName + "/" + chain.name + " failed: " + why);
            }
            return;
        }
        tables_.chains.setRetries(chain.id, chain.retries + 1);
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
    if (job && !job->ended())
        cluster_.cancel(job->id, chain.ownerUid);
    if (job && !job->started()) {
        // Its row gives the seq back now, as the next squeue would show it (cancelled while queued,
        // slurmctld sets its start to its end): a chain that goes on (a resume) may submit that seq anew
        // before the row would be read again.
        ClusterJob withdrawn = *job;
        if (!withdrawn.ended()) {
            withdrawn.state = "CANCELLED";
            withdrawn.startTime = withdrawn.endTime = now_;
        }
        jobWrites_.push_back(JobStore::Write { chain.id, next->seq, withdrawn });
    }
    tables_.submissions.markState(chain.id, next->seq, "cancelled", why);
    return true;
}

// Both successors of a chain, the second first (it follows the first; never the other way round).
bool Provisioner::withdrawSuccessors(
    const LiveChain& live, const ClusterQueue& queue, const std::string& why, bool evenIfStarted)
{
    return withdrawSuccessor(live.chain, live.second, queue, why, evenIfStarted)
        && withdrawSuccessor(live.chain, live.next, queue, why, evenIfStarted);
}

// Signals the predecessor of a handover to checkpoint and exit; recorded only once scancel delivered it,
// so that a failed scancel, or a batond stopped between the handover's commit and the signal, is sent
// again by the next tick. Sent after the tick's steps, with every other owner's at once.
void Provisioner::signalHandover(const ChainRow& chain, const ClusterJob& current, SignalScope scope)
{
    handoverSignals_.push_back(HandoverSignal { chain, current.id, scope, HandoverSignal::Why::Handover });
}

// A job is asked to take its final checkpoint and exit in its chain directory first (the request of
// contract::kHandoverRequestFile, which baton's sessions read within a second), and by TERM only
// `handover_signal_delay` later: a launcher between Slurm and the training (torchrun) kills its ranks
// 30 s after it forwards a TERM, which would cut a long final checkpoint. Without a chain directory or
// a delay, or when the request cannot be written, TERM goes at once. The delay counts from `askedAt`
// (a handover's start, as recorded), else from the request's first writing. Returns whether TERM is due.
bool Provisioner::askBeforeSignal(const ChainRow& chain, const ClusterJob& job, std::optional<std::int64_t> askedAt)
{
    if (config_.handoverSignalDelay.count() == 0 || !chain.chainDir)
        return true;
    HandoverRequest& asked = handoverRequests_[chain.id];
    if (asked.jobId != job.id) { // this batond has not asked yet (a restarted one asks again: the same text)
        asked = HandoverRequest { job.id, askedAt.value_or(now_), false };
        const Json request { { "version", 1 }, { "seq", chain.seq }, { "job_id", job.id }, { "time_unix", now_ } };
        try {
            writeHandoverFile(*chain.chainDir, chain.ownerUid, HandoverFile::Request, request.dump());
            asked.written = true;
            logInfo("chain " + chain.ownerName + "/" + chain.name + ": job " + std::to_string(job.id)
                + " asked in its chain directory to checkpoint and exit; TERM in "
                + std::to_string(config_.handoverSignalDelay.count()) + " s unless it ends");
        } catch (const std::runtime_error& error) {
            metrics_.chainErrors("owner_files").Increment();
            logWarning("chain " + chain.ownerName + "/" + chain.name + ": " + error.what() + "; TERM goes at once");
        }
    }
    return !asked.written || now_ - asked.at >= config_.handoverSignalDelay.count();
}

void Provisioner::sendHandoverSignals()
{
    const std::vector<HandoverSignal> signals = std::exchange(handoverSignals_, {});
    std::vector<OwnerAction> actions;
    actions.reserve(signals.size());
    for (const HandoverSignal& s : signals)
        actions.push_back(OwnerAction { s.chain.ownerUid,
            [this, &s] { cluster_.signal(s.jobId, "TERM", s.scope, s.chain.ownerUid); }, false, nullptr });
    runSlurmActions(actions);
    for (std::size_t i = 0; i < signals.size(); ++i) {
        const ChainRow& chain = signals[i].chain;
        const std::string label = chain.ownerName + "/" + chain.name;
        const std::string job = std::to_string(signals[i].jobId);
        if (!actions[i].ran) {
            logWarning("chain " + label + ": the handover signal to job " + job + " left for the next tick");
            continue;
        }
        std::optional<SlurmError> failure;
        const ActionOutcome outcome = outcomeOf(actions[i], chain, failure);
        if (outcome == ActionOutcome::SlurmFailed) {
            metrics_.chainErrors("slurm").Increment();
            logWarning("chain " + label + ": the handover signal to job " + job + " failed (" + failure->what()
                + "); sent again next tick");
            slurmCallFailed(chain, *failure);
        }
        if (outcome != ActionOutcome::Done)
            continue;
        if (signals[i].why == HandoverSignal::Why::Preempt)
            tables_.chains.setPreemptRequested(chain.id, false);
        else
            tables_.handovers.recordSignal(chain.id, chain.seq, now_);
        logInfo("chain " + label + ": job " + job + " asked to checkpoint and exit ("
            + (signals[i].scope == SignalScope::Steps ? "its srun steps" : "batch shell and steps")
            + (signals[i].why == HandoverSignal::Why::Preempt ? ", preempted by its owner" : "") + ")");
    }
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
    if (chain.preemptRequested) {
        // `batonctl preempt`: the current job is asked to checkpoint and exit, as at a handover; a job
        // that no longer runs has nothing to be asked.
        if (current && current->running() && isAllowed(chain.state, ChainEvent::Preempt)) {
            if (askBeforeSignal(chain, *current, std::nullopt))
                handoverSignals_.push_back(HandoverSignal { chain, current->id,
                    tables_.events.checkpointSignalScope(current->id), HandoverSignal::Why::Preempt });
        } else
            tables_.chains.setPreemptRequested(chain.id, false);
    }
    if (chain.state == ChainState::Paused) {
        // Paused means no job after the current one: a successor not yet running is withdrawn.
        withdrawSuccessors(live, queue, "chain paused", false);
        return;
    }
    // Only a submission still meant to run has a successor: a cancelled or failed one's job is history.
    const auto successor
        = isLive(live.next) ? refreshJob(chain, chain.seq + 1, queue, live.jobs, live.next) : std::nullopt;
    // A second successor is only ever queued behind a waiting first one (successors_in_flight = 2).
    const auto second
        = isLive(live.second) ? refreshJob(chain, chain.seq + 2, queue, live.jobs, live.second) : std::nullopt;
    switch (chain.state) {
    case ChainState::Running:
        if (isLive(live.second)) { // it followed a successor that is gone: nothing for it to follow
            withdrawSuccessor(chain, live.second, queue, "the successor it followed is gone", true);
            return;
        }
        stepRunning(live, current, successor, queue, awaiting);
        return;
    case ChainState::SuccessorPending:
        stepSuccessorPending(live, current, successor, second, queue, awaiting);
        return;
    case ChainState::Handover:
        stepHandover(live, current, successor);
        return;
    case ChainState::Paused:
    case ChainState::Quarantined: // handled above
    case ChainState::Finished:
    case ChainState::Failed:
    case ChainState::Cancelled:
        return;
    }
}

void Provisioner::stepRunning(LiveChain& live, const std::optional<ClusterJob>& current,
    const std::optional<ClusterJob>& successor, const ClusterQueue& queue, std::vector<AwaitingDecision>& awaiting)
{
    const ChainRow& chain = live.chain;
    if (!current) {
        if (live.current && live.current->state == "failed"
            && tables_.chains.transition(chain, ChainEvent::RetryBudgetSpent,
                "sbatch refused job " + std::to_string(chain.seq) + ": " + live.current->error))
            logWarning("chain " + chain.ownerName + "/" + chain.name + " failed: sbatch refused its job: "
                + live.current->error);
        return; // else the first submission is still being recorded
    }
    if (successor && !successor->withdrawn()) { // a successor exists (e.g. the chain was resumed)
        tables_.chains.transition(chain, ChainEvent::SuccessorFound);
        return;
    }
    if (current->ended()) {
        onCurrentEnded(live, *current, queue);
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
}

void Provisioner::stepSuccessorPending(LiveChain& live, const std::optional<ClusterJob>& current,
    const std::optional<ClusterJob>& successor, const std::optional<ClusterJob>& second,
    const ClusterQueue& queue, std::vector<AwaitingDecision>& awaiting)
{
    const ChainRow& chain = live.chain;
    const std::string label = chain.ownerName + "/" + chain.name;
    if (current && current->ended())
        collectSpoolHints(live);
    if (current && current->ended() && live.trainingDone) {
        if (!withdrawSuccessors(live, queue, "training finished", true))
            return; // an intent that may still be in sbatch: judged next tick
        if (tables_.chains.transition(chain, ChainEvent::TrainingDone, "training finished")) {
            tables_.decisions.record(
                chain.id, policyName(chain), "finish", Json::object(), "pending successor cancelled");
            logInfo("chain " + label + " finished; its pending successor was cancelled");
        }
        return;
    }
    if (!successor) {
        // sbatch failed (or the submission went away): back to running, which submits anew; a second
        // successor queued behind it goes first (it would follow a job that is not there).
        const auto& next = live.next;
        if (isLive(next)
            || !withdrawSuccessor(chain, live.second, queue, "the successor it followed was withdrawn", true))
            return;
        if (tables_.chains.transition(chain, ChainEvent::SuccessorWithdrawn))
            logInfo("chain " + label + ": its successor's submission "
                + (next ? next->state + (next->error.empty() ? "" : " (" + next->error + ")") : std::string("is missing"))
                + "; it is submitted again");
        return;
    }
    if (successor->withdrawn()) {
        // Ended without running (cancelled while queued, or refused): it never held the training,
        // so the predecessor goes on; back to running, which submits anew when the policy says so.
        if (!withdrawSuccessor(chain, live.second, queue, "the successor it followed was withdrawn", true))
            return;
        tables_.submissions.markState(
            chain.id, chain.seq + 1, "cancelled", "job ended without running: " + successor->state);
        if (tables_.chains.transition(chain, ChainEvent::SuccessorWithdrawn))
            tables_.decisions.record(chain.id, policyName(chain), "withdrawn",
                Json { { "successor_job_id", successor->id }, { "successor_state", successor->state } },
                "successor ended without running");
        return;
    }
    if (current && current->ended())
        markPredecessorEnded(chain, *current); // before the successor starts, so that it does not wait
    if (!successor->started()) {
        queueSecondSuccessor(live, current, second, queue, awaiting);
        return; // still queued
    }
    const auto waited = static_cast<double>(successor->startTime - successor->submitTime);
    if (const auto predicted = tables_.submissions.resolvePrediction(successor->id, waited))
        metrics_.predictionError().Observe(std::abs(*predicted - waited));
    if (current && current->pending()) {
        // Slurm requeued the predecessor (its node failed, or an operator asked): the successor,
        // which restores the newest checkpoint, carries the chain on; the queued copy of the
        // predecessor would train a second time beside it. Ended next tick, it is then passed.
        withdrawRequeued(chain, *current, "its successor " + std::to_string(successor->id) + " runs");
        return;
    }
    if (current && !current->ended()) {
        startHandover(chain, *current, *successor);
        return;
    }
    // The predecessor had ended already: the chain waited for its successor.
    if (current && current->endTime > 0)
        metrics_.interruption().Observe(
            static_cast<double>(std::max<std::int64_t>(0, successor->startTime - current->endTime)));
    tables_.chains.advance(chain, ChainEvent::PredecessorEnded);
}

// While the successor waits, a second one behind it (successors_in_flight = 2): a queue that waits longer
// than a job starts each successor late however early the one before it went in, unless the next is
// already queued. The policy decides on it as on a predecessor that reaches its limit one limit after the
// current job's (the successor, were it to start as the current job ends), and not past that: a
// successor still waiting then is followed as usual, once it runs.
void Provisioner::queueSecondSuccessor(const LiveChain& live, const std::optional<ClusterJob>& current,
    const std::optional<ClusterJob>& second, const ClusterQueue& queue, std::vector<AwaitingDecision>& awaiting)
{
    const ChainRow& chain = live.chain;
    if (second && second->withdrawn()) { // cancelled while queued: the policy may queue another
        tables_.submissions.markState(
            chain.id, chain.seq + 2, "cancelled", "job ended without running: " + second->state);
        return;
    }
    if (second && second->started()) {
        // It started before the successor it was to follow (one priority order rarely does that): it is
        // cancelled (or, ended already, given up), and the chain goes on with the first.
        logInfo("chain " + chain.ownerName + "/" + chain.name + ": job " + std::to_string(second->id)
            + " started before the successor it follows; cancelling it");
        withdrawSuccessor(chain, live.second, queue, "started before the successor it follows", true);
        return;
    }
    if (config_.successorsInFlight < 2 || isLive(live.second) || live.trainingDone || !current
        || current->startTime <= 0 || current->timeLimitSeconds <= 0)
        return;
    ClusterJob successorAsItWouldRun = *current; // its shape, starting as the current job reaches its limit
    successorAsItWouldRun.startTime = current->startTime + current->timeLimitSeconds;
    if (successorAsItWouldRun.startTime + successorAsItWouldRun.timeLimitSeconds <= now_)
        return;
    awaiting.push_back(AwaitingDecision { chain, successorAsItWouldRun, 2 });
}

// The successor runs while its predecessor does: fence the handover (durably: it is acted on), then signal.
void Provisioner::startHandover(const ChainRow& chain, const ClusterJob& current, const ClusterJob& successor)
{
    const SignalScope scope = tables_.events.checkpointSignalScope(current.id);
    const char* signalScope = scope == SignalScope::Steps ? "steps" : "full";
    const bool askFirst = config_.handoverSignalDelay.count() > 0 && chain.chainDir;
    {
        db::Transaction transaction(tables_.connection(), db::Durability::Durable);
        if (!tables_.chains.transition(chain, ChainEvent::SuccessorStarted))
            return;
        tables_.chains.setLastHandoverSeq(chain.id, chain.seq);
        tables_.handovers.start(chain.id, chain.seq, current.id, successor.id, now_);
        tables_.decisions.record(chain.id, policyName(chain), "handover",
            Json { { "predecessor_job_id", current.id }, { "successor_job_id", successor.id },
                { "signal_scope", signalScope } },
            askFirst ? std::string("predecessor asked in its chain directory, TERM (") + signalScope + ") after "
                    + std::to_string(config_.handoverSignalDelay.count()) + " s"
                     : std::string("predecessor signalled TERM (") + signalScope + ")");
        transaction.commit();
    }
    metrics_.handovers("started").Increment();
    logInfo("chain " + chain.ownerName + "/" + chain.name + ": job " + std::to_string(successor.id)
        + " started while job " + std::to_string(current.id) + " runs: handover");
    if (askBeforeSignal(chain, current, now_))
        signalHandover(chain, current, scope);
}

void Provisioner::stepHandover(
    const LiveChain& live, const std::optional<ClusterJob>& current, const std::optional<ClusterJob>& successor)
{
    const ChainRow& chain = live.chain;
    if (!current)
        return;
    if (current->ended()) {
        markPredecessorEnded(chain, *current); // the successor may still wait for its final checkpoint
        const std::int64_t end = current->endTime > 0 ? current->endTime : now_;
        {
            db::Transaction transaction(tables_.connection());
            const auto seconds = tables_.handovers.complete(chain.id, chain.seq, end);
            if (!tables_.chains.advance(chain, ChainEvent::PredecessorEnded))
                return;
            transaction.commit();
            if (seconds)
                metrics_.handoverDuration().Observe(*seconds);
        }
        metrics_.handovers("completed").Increment();
        if (successor && successor->startTime > 0)
            metrics_.overlap().Observe(static_cast<double>(std::max<std::int64_t>(0, end - successor->startTime)));
        // The handover checkpoint was the last one: nothing left for the successor to do. It resumes, sees
        // the done checkpoint and exits; the chain finishes with it.
        if (live.trainingDone && current->state == "COMPLETED")
            logInfo("chain " + chain.ownerName + "/" + chain.name + ": training finished during a handover");
        return;
    }
    if (current->pending()) { // requeued during the handover: see stepSuccessorPending
        withdrawRequeued(chain, *current, "the handover to its successor is under way");
        return;
    }
    const HandoverStore::Signal signal = live.handoverSignal.value_or(HandoverStore::Signal {});
    if (!signal.sentAt) {
        if (askBeforeSignal(chain, *current, signal.signalledAt))
            signalHandover(chain, *current, tables_.events.checkpointSignalScope(current->id));
        return;
    }
    if (signal.signalledAt && now_ - *signal.signalledAt > config_.handoverTimeout.count()) {
        logWarning("chain " + chain.ownerName + "/" + chain.name + ": job " + std::to_string(current->id)
            + " did not exit within " + std::to_string(config_.handoverTimeout.count())
            + " s of the handover signal; cancelling it");
        metrics_.handovers("timed_out").Increment();
        cluster_.cancel(current->id, chain.ownerUid);
    }
}

} // namespace baton::service
