// batond's configuration: one JSON file (every key optional, every key validated, unknown keys are
// errors) plus command-line flags that override it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace baton::service {

enum class LogLevel { Error, Warning, Info, Debug };

struct ServiceConfig {
    std::string listenAddress = "127.0.0.1";
    int listenPort = 8760;
    std::string database; // libpq conninfo; empty = PG* environment
    std::string instanceName; // shown in logs and metrics; default: host name and pid
    std::chrono::milliseconds tick { 30'000 }; // policy loop period
    std::string policy = "checkpoint-aware"; // reactive, avg, predict, checkpoint-aware
    std::string modelName = "ls6"; // the `models` row the learned policies load
    double quantile = 0.5; // q of the learned policies when the model stores none
    std::string operatorsGroup; // unix group whose members may act on every chain
    std::vector<std::string> slurmUsers { "root" }; // who may send plugin events (uid 0 always may)
    // Successors go in at least this long before the predecessor's limit (at most half of that limit).
    std::chrono::seconds submitLead { 60 };
    // Successors a chain keeps in the queue at once: 2 lets the policy queue the job after a waiting
    // successor too, for queues that wait longer than a job's limit.
    int successorsInFlight = 1;
    int retryBudget = 3; // resubmissions of a job that failed without progress
    std::chrono::seconds handoverTimeout {
        600
    }; // a signalled predecessor still running after this is cancelled
    // A job asked to checkpoint and exit in its chain directory gets TERM this much later (0: at once).
    std::chrono::seconds handoverSignalDelay { 30 };
    std::chrono::seconds slurmTimeout { 30 }; // every squeue/sbatch/scancel call
    std::chrono::seconds submitGrace { 120 }; // an intent not visible in squeue after this is retried
    int maxLiveChainsPerUser = 100; // POST /v1/chains refuses more (429); 0 = no limit
    int retentionDays = 90; // processed events and decisions older than this are deleted; 0 = kept
    std::size_t maxBodyBytes = 64 * 1024;
    int maxJsonDepth = 16;
    int httpThreads = 8;
    std::string metricsToken; // optional bearer token for /metrics, /healthz and /readyz
    std::string mungeSocket; // empty = munged's default socket
    std::string sbatch = "sbatch", squeue = "squeue", scancel = "scancel", scontrol = "scontrol";
    std::optional<int> clusterNodes; // nodes the policy features assume; default: from the queue
    LogLevel logLevel = LogLevel::Info;
};

class ConfigError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Reads and validates the file; throws ConfigError naming the key.
ServiceConfig loadConfigFile(const std::filesystem::path& path, ServiceConfig base = {});
// Applies the flags (after --config, which is read first); throws ConfigError. Returns false for --help.
bool applyFlags(ServiceConfig& config, std::span<const std::string> args);
// The rules that tie keys together; throws ConfigError (both functions above call it).
void checkConsistency(const ServiceConfig& config, const std::string& where);
std::string flagsHelp();

} // namespace baton::service
