#include "submitter.hpp"

#include "log.hpp"

namespace baton::service {

namespace {

using Json = nlohmann::json;

// Reasons of submissions made after the predecessor ended: no final checkpoint can come any more.
bool afterPredecessorEnded(const std::string& reason)
{
    return reason == "reactive" || reason == "retry" || reason == "node_failure";
}

} // namespace

Submitter::Submitter(Tables& tables, Cluster& cluster, Metrics& metrics)
    : tables_(tables)
    , cluster_(cluster)
    , metrics_(metrics)
{ }

std::string Submitter::submissionKey(const ChainRow& chain, int seq)
{
    return "baton:" + std::to_string(chain.id) + ":" + std::to_string(seq) + ":" + chain.token;
}

std::optional<std::int64_t> Submitter::submitRecorded(const ChainRow& chain, int seq)
{
    const auto submission = tables_.submissions.find(chain.id, seq);
    if (!submission)
        return std::nullopt;
    // A tick reads chains without their specs (a batch script each): read it now that it is needed.
    const auto jobId = submitIntent(chain, seq, submission->key, submission->reason,
        chain.spec.is_null() ? tables_.chains.spec(chain.id) : chain.spec);
    if (jobId)
        tables_.submissions.recordSubmitted(
            { SubmittedJob { submission->key, chain.id, *jobId, std::nullopt } });
    return jobId;
}

// Runs sbatch for an intent. On success the caller records the job id (after a crash before that, the
// next tick finds the job by its key in the queue); a failure is recorded here.
std::optional<std::int64_t> Submitter::submitIntent(
    const ChainRow& chain, int seq, const std::string& key, const std::string& reason, const Json& spec)
{
    const auto request = requestFor(chain, seq, key, reason, spec);
    if (!request)
        return std::nullopt;
    try {
        return outcome(chain, seq, reason, sbatch(*request), nullptr);
    } catch (const SlurmError& error) {
        return outcome(chain, seq, reason, std::nullopt, &error);
    }
}

std::optional<SubmitRequest> Submitter::requestFor(
    const ChainRow& chain, int seq, const std::string& key, const std::string& reason, const Json& spec)
{
    SubmitRequest request;
    request.owner = static_cast<uid_t>(chain.ownerUid);
    request.workdir = spec.is_object() ? spec.value("workdir", std::string()) : std::string();
    request.scriptText = spec.is_object() ? spec.value("script", std::string()) : std::string();
    request.key = key;
    // The job's seq is batond's, not the order of the chain's starts: a second successor may start with
    // the first, or before it (and be cancelled).
    request.seq = seq;
    // The plugin must run the job as this chain's: the option on the command line wins over the script's.
    request.args.push_back("--baton=" + chain.name);
    if (const auto args = spec.find("sbatch_args"); args != spec.end() && args->is_array())
        for (const auto& arg : *args)
            if (arg.is_string())
                request.args.push_back(arg.get<std::string>());
    // Its restore need not wait for a final checkpoint that a dead predecessor cannot write (given last,
    // it wins over the chain's own).
    if (afterPredecessorEnded(reason))
        request.args.push_back("--baton-handover-wait=0");
    if (request.scriptText.empty()) {
        tables_.submissions.markState(chain.id, seq, "failed", "the chain has no batch script to submit");
        return std::nullopt;
    }
    if (!stillLeading_()) // the intent stays for the instance that leads now
        throw LeadershipLost("this instance lost the leadership; sbatch left to the active one");
    return request;
}

std::optional<std::int64_t> Submitter::outcome(const ChainRow& chain, int seq, const std::string& reason,
    std::optional<std::int64_t> jobId, const SlurmError* failure)
{
    if (failure) {
        metrics_.submissionFailures().Increment();
        logError("chain " + chain.ownerName + "/" + chain.name + ": sbatch failed: " + failure->what());
        tables_.submissions.markState(chain.id, seq, "failed", failure->what());
        return std::nullopt;
    }
    metrics_.submissions(reason).Increment();
    logInfo("chain " + chain.ownerName + "/" + chain.name + ": submitted job " + std::to_string(*jobId) + " (seq "
        + std::to_string(seq) + ", " + reason + ")");
    return jobId;
}

} // namespace baton::service
