// The jobs of `squeue --json` (Slurm 22.05, OpenAPI v0.0.38 field names), reduced to what the
// provisioner uses. A busy cluster's document is tens of megabytes, so it is scanned once without
// building a DOM; fields this reader does not know are skipped, missing ones keep their defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace baton::slurm {

using JobId = std::int64_t;

struct QueueJob {
    JobId jobId = 0;
    JobId arrayJobId = 0; // 0 unless part of an array
    std::optional<std::int64_t> arrayTaskId; // unset for a pending array's remaining tasks
    std::string arrayTaskString; // the pending tasks of an array record, e.g. "1-9"
    std::uint32_t userId = 0;
    std::string userName;
    std::uint32_t groupId = 0;
    std::string name;
    std::string state; // PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    std::string stateReason; // "None", "Resources", "Priority", "JobHeldUser", ...
    std::string partition;
    std::string nodes; // allocated node list; empty if it never ran
    // Seconds since the epoch; 0 = not known. For a pending job startTime may be Slurm's estimate.
    std::int64_t submitTime = 0;
    std::int64_t eligibleTime = 0; // when its dependencies and begin time were met; 0 until then
    std::int64_t startTime = 0;
    std::int64_t endTime = 0;
    std::optional<std::int64_t> timeLimitMinutes; // unset = no limit (UNLIMITED)
    std::int32_t nodeCount = 0;
    std::int64_t priority = 0; // Slurm's job priority (0 = held)
    std::string comment;
    std::int32_t exitStatus = 0; // from Slurm's wait status: the batch script's exit status ...
    std::int32_t exitSignal = 0; // ... or the signal that ended it
    bool batch = false;
    std::string workdir; // current_working_directory
    // The request beyond time, nodes, name and partition, as sbatch took it (command line and #SBATCH
    // lines alike): what a successor of a plain `sbatch --baton` job must ask for again.
    std::string account;
    std::string qos;
    std::string tresPerNode; // "gres:gpu:2" (22.05) or "gres/gpu:2" (23.02 and later), comma-separated
    std::string features; // --constraint
    std::optional<std::int64_t> tasks; // unset: not reported
    std::optional<std::int64_t> tasksPerNode;
    std::optional<std::int64_t> cpusPerTask;
    std::optional<std::int64_t> memoryPerNodeMiB;
    std::optional<std::int64_t> memoryPerCpuMiB;
    // Not read: what batond does not use (command, output paths...) costs an allocation per job per tick.

    bool pending() const { return state == "PENDING"; }
    // Holds nodes now (COMPLETING jobs still occupy theirs).
    bool active() const
    {
        return state == "RUNNING" || state == "COMPLETING" || state == "SUSPENDED" || state == "CONFIGURING";
    }
    // Got nodes at some point: running now or finished after running (not cancelled while pending).
    bool started() const { return !pending() && startTime > 0 && !nodes.empty(); }
};

struct QueueSnapshot {
    std::int64_t takenAt = 0; // when squeue ran (seconds since the epoch)
    std::string slurmRelease; // meta.Slurm.release, e.g. "22.05.8"
    std::vector<std::string> errors; // the document's own error list, usually empty
    std::vector<QueueJob> jobs;
};

class SqueueParseError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Throws SqueueParseError (with the byte offset or the job and field) on malformed documents.
QueueSnapshot parseSqueueJson(std::string_view text, std::int64_t takenAt);

// True when `text` is valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF) without a NUL byte: what PostgreSQL text and nlohmann's dump() accept.
bool isCleanUtf8(std::string_view text) noexcept;
// Replaces each byte of `text` that is not part of a valid UTF-8 sequence, and each NUL, by U+FFFD.
// The reader applies it to every string it keeps: job names, comments and working directories are the
// users' own, and one job's bytes must not make the tick fail when they are stored or sent as JSON.
void replaceUncleanUtf8(std::string& text);

// The nodes `sinfo --json` lists that can run jobs (not down, drained, draining or failing).
// Throws SqueueParseError on a malformed document.
int parseSinfoUsableNodes(std::string_view text);

} // namespace baton::slurm
