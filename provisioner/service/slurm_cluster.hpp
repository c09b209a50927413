// The live Cluster: Slurm's programs through the provisioner's Slurm client, with each call timed and
// counted in the metrics.
#pragma once

#include "cluster.hpp"
#include "config.hpp"
#include "metrics.hpp"

#include "slurm/slurm_client.hpp"

namespace baton::service {

// slurmctld's jobs as batond's state machine sees them, with the snapshot they came from.
ClusterQueue toClusterQueue(slurm::QueueSnapshot squeue);

class SlurmCluster final : public Cluster {
public:
    SlurmCluster(const ServiceConfig& config, Metrics& metrics);

    ClusterQueue queue() override;
    std::int64_t submit(const SubmitRequest& request) override;
    void signal(
        std::int64_t jobId, const std::string& signal, SignalScope scope, std::int64_t ownerUid) override;
    void cancel(std::int64_t jobId, std::int64_t ownerUid) override;
    std::string batchScript(std::int64_t jobId, std::int64_t ownerUid) override;
    // A cheap question to slurmctld, for the readiness of a standby.
    bool reachable();
    // Nodes that can run jobs: the configured cluster_nodes, else sinfo's count (asked once a minute).
    int usableNodes();

private:
    template<typename Call> auto timed(const char* command, Call call);

    const ServiceConfig& config_;
    Metrics& metrics_;
    slurm::SlurmClient client_;
    int nodes_ = 0;
    std::chrono::steady_clock::time_point nodesAsked_ {};
};

} // namespace baton::service
