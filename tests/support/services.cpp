#include "services.hpp"

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace baton::test {

namespace {

std::string script(const char* name)
{
    return (sourceRoot() / "deploy" / "local" / name).string();
}

// The last non-empty line a script printed: its answer, after any diagnostics.
std::string lastLine(const std::string& output)
{
    auto end = output.find_last_not_of('\n');
    if (end == std::string::npos)
        return {};
    auto begin = output.rfind('\n', end);
    return output.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

}  // namespace

PostgresServer::PostgresServer()
{
    auto started = run({"bash", script("pg.sh"), "start", dir().string()});
    if (started.exitCode != 0)
        throw std::runtime_error("cannot start PostgreSQL:\n" + started.output);
    conninfo_ = lastLine(started.output);
}

PostgresServer::~PostgresServer()
{
    run({"bash", script("pg.sh"), "stop", dir().string()});
}

std::string PostgresServer::createDatabase(const std::string& name) const
{
    auto created = run({"createdb", "--maintenance-db=" + conninfo_, "--", name});
    if (created.exitCode != 0)
        throw std::runtime_error("cannot create database " + name + ":\n" + created.output);
    std::string conninfo = conninfo_;
    conninfo.replace(conninfo.find("dbname=postgres"), 15, "dbname=" + name);
    return conninfo;
}

SlurmCluster::SlurmCluster(std::vector<std::string> plugstackLines)
{
    std::vector<std::string> argv{"bash", script("slurm.sh"), "start", dir().string()};
    argv.insert(argv.end(), plugstackLines.begin(), plugstackLines.end());
    auto started = run(argv);
    const std::string answer = lastLine(started.output);
    if (started.exitCode != 0 || answer.rfind("SLURM_CONF=", 0) != 0) {
        run({"bash", script("slurm.sh"), "stop", dir().string()});
        throw std::runtime_error("cannot start Slurm:\n" + started.output);
    }
    slurmConf_ = answer.substr(std::string("SLURM_CONF=").size());
    setenv("SLURM_CONF", slurmConf_.c_str(), 1);
}

void SlurmCluster::waitUntilIdle() const
{
    setenv("SLURM_CONF", slurmConf_.c_str(), 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    for (;;) {
        const auto jobs = run({"squeue", "-h", "-o", "%i"});
        const auto nodes = run({"sinfo", "-h", "-o", "%t"});
        const bool idle = jobs.exitCode == 0 && jobs.output.find_first_not_of(" \n") == std::string::npos
            && nodes.exitCode == 0 && !nodes.output.empty()
            && nodes.output.find_first_not_of("idle\n") == std::string::npos;
        if (idle)
            return;
        if (std::chrono::steady_clock::now() > deadline)
            throw std::runtime_error("Slurm is still busy after a minute:\n" + jobs.output + nodes.output);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
}

SlurmCluster::~SlurmCluster()
{
    run({"bash", script("slurm.sh"), "stop", dir().string()});
    unsetenv("SLURM_CONF");
}

}  // namespace baton::test
