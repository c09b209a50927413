// Slurm through its command-line programs (squeue, sbatch, scancel, scontrol, sinfo), each run with an
// argv and an explicit environment, never through a shell. Submissions run as the chain's owner.
#pragma once

#include "command.hpp"
#include "squeue_json.hpp"
#include "signal_scope.hpp"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace baton::slurm {

struct SlurmOptions {
    // Each program: a bare name is looked up in `searchPath` when the client is made; a path is kept.
    std::string squeue = "squeue";
    std::string sbatch = "sbatch";
    std::string scancel = "scancel";
    std::string scontrol = "scontrol";
    std::string sinfo = "sinfo";
    std::optional<std::string> searchPath; // unset = this process's PATH
    std::optional<std::string> slurmConf; // SLURM_CONF given to every command; unset = Slurm's default
    std::string childPath = "/usr/local/bin:/usr/bin:/bin"; // PATH given to every command
    std::chrono::milliseconds queryTimeout { 60'000 }; // squeue, sinfo, scontrol
    std::chrono::milliseconds submitTimeout { 60'000 }; // sbatch
    std::chrono::milliseconds controlTimeout { 30'000 }; // scancel
    std::size_t maxQueueBytes = std::size_t { 1 } << 30; // squeue --json of a large cluster
    std::size_t maxScriptBytes = std::size_t { 16 } << 20; // above Slurm's default max_script_size
};

struct SubmitRequest {
    uid_t owner = 0; // runs as this user, with the user's primary and supplementary groups
    std::string key; // the idempotency key, passed as --comment (e.g. "baton:<chain id>:<seq>")
    std::vector<std::string> args; // sbatch options, placed before the script: checkSbatchArgs must pass
    std::filesystem::path script; // a file the owner can read, or empty with scriptText
    std::filesystem::path workdir; // sbatch runs here (the job's default working directory)
    std::string scriptText; // given to sbatch on standard input when `script` is empty
    std::optional<int> seq; // the job's seq in its chain, passed to the plugin as --baton-seq
};

// A Slurm command failed: which command, and what it said.
class SlurmError : public std::runtime_error {
public:
    SlurmError(std::string command, std::string detail);
    const std::string& command() const { return command_; }
    const std::string& detail() const { return detail_; }

private:
    std::string command_;
    std::string detail_;
};

class SlurmClient {
public:
    explicit SlurmClient(SlurmOptions options = {});

    // The whole cluster in one `squeue --json`: every user, every state, recently finished jobs too.
    QueueSnapshot queue() const;
    // `sbatch --parsable --comment=<key> [args...] <script>` as the owner in the workdir; the job id.
    JobId submit(const SubmitRequest& request) const;
    // The job controls below run as `asUser` when given (the job's owner, with the owner's groups):
    // every user may signal, cancel and read the script of their own jobs, so batond needs no Slurm
    // operator rights, only the CAP_SETUID/CAP_SETGID its submissions need anyway.
    // `scancel [--full] --signal=<name> <id>`, `name` e.g. "TERM", "USR1"; `scope` says which processes.
    void signal(JobId job, const std::string& name, SignalScope scope = SignalScope::Full,
        std::optional<uid_t> asUser = std::nullopt) const;
    // `scancel <id>`. Cancelling a job that already ended is not an error.
    void cancel(JobId job, std::optional<uid_t> asUser = std::nullopt) const;
    // The batch script Slurm stored for the job (`scontrol write batch_script <id> -`): what a chain
    // started with plain sbatch resubmits.
    std::string batchScript(JobId job, std::optional<uid_t> asUser = std::nullopt) const;
    // The job's record, if Slurm still knows it. Slurm 22.05 has no `scontrol show job --json` and its
    // `squeue --json` ignores job filters, so this reads the whole queue.
    std::optional<QueueJob> jobDetail(JobId job) const;
    // Nodes that can run jobs now, from `sinfo --json`.
    int usableNodes() const;

    const SlurmOptions& options() const { return options_; }

private:
    CommandResult run(std::vector<std::string> argv, std::chrono::milliseconds timeout, std::size_t maxBytes,
        const std::optional<uid_t>& asUser = std::nullopt,
        const std::optional<std::filesystem::path>& workdir = std::nullopt, int stdinFd = -1) const;
    std::string program(const std::string& name) const;

    SlurmOptions options_;
};

// The job id of `sbatch --parsable` output ("123" or "123;cluster"); throws SlurmError otherwise.
JobId parseSbatchOutput(const std::string& out);

} // namespace baton::slurm
