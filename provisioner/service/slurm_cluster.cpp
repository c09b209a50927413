#include "slurm_cluster.hpp"

#include "slurm/sbatch_args.hpp"

#include <stdexcept>

namespace baton::service {

namespace {

slurm::SlurmOptions clientOptions(const ServiceConfig& config)
{
    slurm::SlurmOptions options;
    options.squeue = config.squeue;
    options.sbatch = config.sbatch;
    options.scancel = config.scancel;
    options.scontrol = config.scontrol;
    if (const char* conf = std::getenv("SLURM_CONF"); conf && *conf)
        options.slurmConf = conf;
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config.slurmTimeout);
    options.queryTimeout = options.submitTimeout = options.controlTimeout = timeout;
    return options;
}

// squeue's tres_per_node ("gres:gpu:2" in 22.05, "gres/gpu:2" later; comma-separated) in sbatch's
// --gres form ("gpu:2"); entries that are not generic resources are left out.
std::string gresOf(std::string_view tres)
{
    std::string gres;
    while (!tres.empty()) {
        const auto comma = tres.find(',');
        std::string_view entry = tres.substr(0, comma);
        tres = comma == std::string_view::npos ? std::string_view() : tres.substr(comma + 1);
        for (std::string_view prefix : { "gres:", "gres/" })
            if (entry.starts_with(prefix) && entry.size() > prefix.size()) {
                gres += (gres.empty() ? "" : ",") + std::string(entry.substr(prefix.size()));
                break;
            }
    }
    return gres;
}

ClusterJob toClusterJob(const slurm::QueueJob& job)
{
    ClusterJob out;
    out.id = job.jobId;
    out.userId = job.userId;
    out.userName = job.userName;
    out.name = job.name;
    out.state = job.state;
    out.comment = job.comment;
    out.submitTime = job.submitTime;
    // squeue reports an estimated start for pending jobs: only a job that ran has a start.
    out.startTime = job.pending() ? 0 : job.startTime;
    out.endTime = job.active() || job.pending() ? 0 : job.endTime;
    out.timeLimitSeconds = job.timeLimitMinutes ? *job.timeLimitMinutes * 60 : 0;
    out.nodes = std::max(1, static_cast<int>(job.nodeCount));
    out.priority = static_cast<double>(job.priority);
    if (!job.pending() && !job.active())
        out.exitCode = job.exitSignal != 0 ? 128 + job.exitSignal : job.exitStatus;
    out.workdir = job.workdir;
    out.partition = job.partition;
    auto positive = [](const std::optional<std::int64_t>& v) { return v && *v > 0 ? *v : 0; };
    out.request = { job.account, job.qos, gresOf(job.tresPerNode), job.features, positive(job.tasks),
        positive(job.tasksPerNode), positive(job.cpusPerTask), positive(job.memoryPerNodeMiB),
        positive(job.memoryPerCpuMiB) };
    return out;
}

} // namespace

ClusterQueue toClusterQueue(slurm::QueueSnapshot squeue)
{
    ClusterQueue queue;
    queue.jobs.reserve(squeue.jobs.size());
    for (const auto& job : squeue.jobs)
        queue.jobs.push_back(toClusterJob(job));
    queue.squeue = std::move(squeue);
    return queue;
}

SlurmCluster::SlurmCluster(const ServiceConfig& config, Metrics& metrics)
    : config_(config)
    , metrics_(metrics)
    , client_(clientOptions(config))
{ }

template<typename Call> auto SlurmCluster::timed(const char* command, Call call)
{
    const ScopedTimer timer(metrics_.slurmCall(command));
    try {
        return call();
    } catch (const SlurmError&) {
        metrics_.slurmErrors(command).Increment();
        throw;
    } catch (const std::runtime_error& error) {
        metrics_.slurmErrors(command).Increment();
        throw SlurmError(command, error.what());
    }
}

ClusterQueue SlurmCluster::queue()
{
    return toClusterQueue(timed("squeue", [&] { return client_.queue(); }));
}

std::int64_t SlurmCluster::submit(const SubmitRequest& request)
{
    // Options a chain stored before they were checked at its creation, and script directives that would
    // make sbatch wait or submit nothing, fail this chain's submission with the reason, as any sbatch
    // error does (the client would throw std::invalid_argument).
    auto refused = slurm::checkSbatchArgs(request.args, slurm::ChainOption::AllowedOnce);
    if (!refused)
        refused = slurm::checkScriptDirectives(request.scriptText);
    if (refused)
        throw SlurmError("sbatch", *refused);
    return timed("sbatch", [&] { return client_.submit(request); });
}

void SlurmCluster::signal(
    std::int64_t jobId, const std::string& signal, SignalScope scope, std::int64_t ownerUid)
{
    timed("scancel", [&] {
        client_.signal(jobId, signal, scope, static_cast<uid_t>(ownerUid));
        return 0;
    });
}

void SlurmCluster::cancel(std::int64_t jobId, std::int64_t ownerUid)
{
    timed("scancel", [&] {
        client_.cancel(jobId, static_cast<uid_t>(ownerUid));
        return 0;
    });
}

std::string SlurmCluster::batchScript(std::int64_t jobId, std::int64_t ownerUid)
{
    return timed("scontrol", [&] {
        std::string script = client_.batchScript(jobId, static_cast<uid_t>(ownerUid));
        // The script is stored in the chain's spec, a JSON document in PostgreSQL: bytes that are not
        // UTF-8 would fail there (and in every dump) for the whole tick. Changing them would change the
        // job, so this chain goes without a stored script instead.
        if (!slurm::isCleanUtf8(script))
            throw SlurmError("scontrol write batch_script " + std::to_string(jobId),
                "the batch script is not valid UTF-8 text (or holds a NUL byte); it cannot be stored");
        return script;
    });
}

bool SlurmCluster::reachable()
{
    try {
        return timed("sinfo", [&] { return client_.usableNodes(); }) >= 0;
    } catch (const SlurmError&) {
        return false;
    }
}

} // namespace baton::service

namespace baton::service {

int SlurmCluster::usableNodes()
{
    if (config_.clusterNodes)
        return *config_.clusterNodes;
    const auto now = std::chrono::steady_clock::now();
    if (nodes_ <= 0 || now - nodesAsked_ > std::chrono::minutes(1)) {
        nodes_ = timed("sinfo", [&] { return client_.usableNodes(); });
        nodesAsked_ = now;
    }
    return std::max(1, nodes_);
}

} // namespace baton::service
