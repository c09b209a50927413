// Real services for the pg, slurm and e2e suites, started through the deploy/local/ scripts in a
// temporary directory and stopped when the object goes away. A service that cannot start throws:
// a suite whose service is missing fails, it never passes by doing nothing.
#pragma once

#include "process.hpp"

#include <string>
#include <vector>

namespace baton::test {

class PostgresServer {
public:
    PostgresServer();
    ~PostgresServer();
    PostgresServer(const PostgresServer&) = delete;
    PostgresServer& operator=(const PostgresServer&) = delete;

    // libpq connection string of the server's `postgres` database.
    const std::string& conninfo() const { return conninfo_; }
    const std::filesystem::path& dir() const { return dir_.path(); }

    // Creates a fresh database and returns its connection string.
    std::string createDatabase(const std::string& name) const;

private:
    TempDir dir_{"baton-pg"};
    std::string conninfo_;
};

class SlurmCluster {
public:
    // plugstackLines become the cluster's plugstack.conf, e.g. "required /path/spank_baton.so".
    explicit SlurmCluster(std::vector<std::string> plugstackLines = {});
    ~SlurmCluster();
    SlurmCluster(const SlurmCluster&) = delete;
    SlurmCluster& operator=(const SlurmCluster&) = delete;

    // Also exported as SLURM_CONF into this process, so that sbatch, squeue, ... reach this cluster.
    const std::string& slurmConf() const { return slurmConf_; }
    const std::filesystem::path& dir() const { return dir_.path(); }

    // Waits (up to a minute) until no job is queued or completing and every node is idle. `srun --uid`
    // needs this: a queued allocation's answer is signed for the job's user, and root's srun cannot read it.
    void waitUntilIdle() const;

private:
    TempDir dir_{"baton-slurm"};
    std::string slurmConf_;
};

}  // namespace baton::test
