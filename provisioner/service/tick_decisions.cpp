#include "provisioner.hpp"

#include "log.hpp"
#include "owner_actions.hpp"

#include "db/errors.hpp"
#include "db/transaction.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace baton::service {

using Json = nlohmann::json;

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
        tables_.decisions.recordMany(decisions);
        return 0;
    }
    std::unordered_map<std::int64_t, SubmissionStore::RecordedIntent> specs; // of the chains whose intent was written
    {
        std::vector<IntentRequest> requests;
        for (const SubmissionStart& start : starts) {
            const ChainEvent event = start.ahead == 1 ? ChainEvent::SubmitSuccessor : ChainEvent::QueueSecondSuccessor;
            if (!isAllowed(start.chain->state, event))
                continue;
            const int seq = start.chain->seq + start.ahead;
            requests.push_back(IntentRequest {
                start.chain->id, start.chain->state, seq, Submitter::submissionKey(*start.chain, seq), start.reason });
        }
        db::Transaction transaction(tables_.connection(), db::Durability::Durable);
        specs = tables_.submissions.recordIntents(requests);
        for (const SubmissionStart& start : starts)
            if (specs.contains(start.chain->id))
                decisions.push_back(
                    DecisionInput { start.chain->id, policyName(*start.chain), "submit", start.inputs, start.reason });
        tables_.decisions.recordMany(decisions);
        transaction.commit();
    }
    std::vector<SubmittedJob> submitted;
    // The requests first, on this thread; then every owner's sbatch at once (owner_actions.hpp); then
    // their outcomes, here again: one owner's hung sbatch delays no other owner's successor.
    struct Pending {
        const ChainRow* chain;
        int seq;
        std::string reason;
        std::optional<double> predictedWait;
        SubmitRequest request;
        std::int64_t jobId = 0;
    };
    std::vector<Pending> pending;
    for (const SubmissionStart& start : starts) {
        const ChainRow& chain = *start.chain;
        const auto spec = specs.find(chain.id);
        if (spec == specs.end())
            continue;
        const int seq = chain.seq + start.ahead;
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
            if (auto request = submitter_.requestFor(chain, seq, key, start.reason, spec->second.spec))
                pending.push_back(Pending { &chain, seq, start.reason, predictedWait, std::move(*request) });
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
    std::vector<OwnerAction> actions;
    actions.reserve(pending.size());
    for (Pending& p : pending)
        actions.push_back(
            OwnerAction { p.chain->ownerUid, [this, &p] { p.jobId = submitter_.sbatch(p.request); }, false, nullptr });
    runSlurmActions(actions);
    for (std::size_t i = 0; i < pending.size(); ++i) {
        const Pending& p = pending[i];
        const ChainRow& chain = *p.chain;
        if (!actions[i].ran) { // the intent stays: the next tick submits it
            logWarning("chain " + chain.ownerName + "/" + chain.name + ": sbatch of seq " + std::to_string(p.seq)
                + " left for the next tick (its owner's earlier Slurm calls took this tick's time)");
            continue;
        }
        std::optional<SlurmError> failure;
        try {
            switch (outcomeOf(actions[i], chain, failure)) {
            case ActionOutcome::Done:
                if (const auto jobId = submitter_.outcome(chain, p.seq, p.reason, p.jobId, nullptr))
                    submitted.push_back(SubmittedJob { p.request.key, chain.id, *jobId, p.predictedWait });
                break;
            case ActionOutcome::SlurmFailed:
                submitter_.outcome(chain, p.seq, p.reason, std::nullopt, &*failure);
                slurmCallFailed(chain, *failure);
                break;
            case ActionOutcome::Settled:
                break;
            }
        } catch (const db::DbError& error) {
            if (!db::isChainDataError(error))
                throw;
            chainFailed(chain, "data", error.what(), false);
        } catch (const std::exception& error) {
            chainFailed(chain, "internal", error.what(), false);
        }
    }
    tables_.submissions.recordSubmitted(submitted);
    for (const SubmittedJob& job : submitted)
        submittedThisTick_.insert(job.slurmJobId);
    return specs.size();
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
        const std::string& policyName = this->policyName(chain);
        const int ahead = awaiting[i].ahead;
        sim::DecisionPoint point = points.at(i);
        const ClusterJob& running = awaiting[i].current;
        if (ahead == 1 && chain.seq > 0 && running.started() && running.submitTime > 0)
            point.lastSuccessorWait = static_cast<double>(running.startTime - running.submitTime);
        try {
            const sim::Policy& policy = policies_.forChain(chain.policy);
            // The lead floor is the last moment for the successor; a second one has a whole limit more.
            const std::int64_t lead
                = sim::submitLeadFor(config_.submitLead.count(), running.timeLimitSeconds);
            const bool submit
                = ahead == 1 ? sim::firstSubmitWithLead(policy, { &point, 1 }, lead) == 0 : policy.submitNow(point);
            // What the decision row says the policy saw; built only for the rows that are written.
            const auto inputs = [&] {
                using sim::Feature;
                Json seen { { "remaining_s", point.remaining }, { "recent_mean_wait_s", point.recentMeanWait },
                    { "queue_pending", at(point.features, Feature::PendingJobs) },
                    { "queue_ahead", at(point.features, Feature::AheadJobs) },
                    { "free_nodes", at(point.features, Feature::FreeNodes) } };
                // What the policy expects the successor to wait: the model's, or avg's recent mean.
                if (sim::isLearnedPolicy(policyName) && std::isfinite(point.meanLogWait))
                    seen["predicted_wait_s"] = std::expm1(point.meanLogWait);
                else if (policyName != "reactive")
                    seen["predicted_wait_s"] = point.recentMeanWait;
                if (std::isfinite(point.lastSuccessorWait))
                    seen["last_successor_wait_s"] = point.lastSuccessorWait;
                if (ahead > 1)
                    seen["ahead"] = ahead;
                return seen;
            };
            if (submit) {
                submissions.push_back(SubmissionStart { &chain, ahead == 1 ? "policy" : "ahead", inputs(), ahead });
                continue;
            }
            const std::int64_t slot = (now_ + waitRecordPhase(chain.id)) / waitRecordSeconds;
            waitSlots.emplace(chain.id, slot);
            if (const auto last = waitSlot_.find(chain.id); last != waitSlot_.end() && last->second == slot)
                continue;
            waits.push_back(DecisionInput { chain.id, policyName, "wait", inputs(), "" });
        } catch (const db::DbError&) {
            throw;
        } catch (const std::exception& error) {
            logError("chain " + chain.ownerName + "/" + chain.name + ": " + error.what());
        }
    }
    waitSlot_ = std::move(waitSlots);
    startSubmissions(submissions, queue, std::move(waits));
}

} // namespace baton::service
