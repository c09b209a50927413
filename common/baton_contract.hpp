// The BATON_* contract between the SPANK plugin (which writes the environment and reads checkpoint
// directories) and the checkpointer (which reads the environment and writes checkpoint directories):
// variable names, the ranges of their values and the checkpoint directory name, in one place that both
// sides include, so that whatever one side writes the other accepts. docs/contracts.md states the same.
// Standard library only: the plugin runs inside slurmstepd and links nothing of the checkpointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace baton::contract {

inline constexpr const char* kChainVar = "BATON_CHAIN";
inline constexpr const char* kChainDirVar = "BATON_CHAIN_DIR";
inline constexpr const char* kJobIdVar = "BATON_JOB_ID";
// The job's position in its chain, its seq: 0 for the first job. Not Slurm's SLURM_RESTART_COUNT, which
// counts how often Slurm requeued one job.
inline constexpr const char* kChainSeqVar = "BATON_CHAIN_SEQ";
// Deprecated alias of kChainSeqVar, exported with the same value for job scripts that read it; the
// checkpointer reads it only where BATON_CHAIN_SEQ is unset.
inline constexpr const char* kLegacyRestartCountVar = "BATON_RESTART_COUNT";
inline constexpr const char* kDeadlineVar = "BATON_DEADLINE";
inline constexpr const char* kDeadlineMarginVar = "BATON_DEADLINE_MARGIN";
inline constexpr const char* kOverheadVar = "BATON_OVERHEAD";
inline constexpr const char* kKeepVar = "BATON_KEEP";
inline constexpr const char* kHandoverWaitVar = "BATON_HANDOVER_WAIT";
inline constexpr const char* kProvisionerUrlVar = "BATON_PROVISIONER_URL";
// Two-level storage: the chain's node-local directory, how many checkpoints it keeps (the BATON_KEEP
// range) and the drain's rate bound in MB/s (0 = unbounded, up to kDrainRateMax).
inline constexpr const char* kLocalDirVar = "BATON_LOCAL_DIR";
inline constexpr const char* kLocalKeepVar = "BATON_LOCAL_KEEP";
inline constexpr const char* kDrainRateVar = "BATON_DRAIN_MBPS";
inline constexpr double kDrainRateMax = 1e7;

// The manifest's record of the writer's seq. Manifests written before the rename name it
// `restart_count`: readers take kManifestSeqKey, else the legacy key.
inline constexpr const char* kManifestSeqKey = "seq";
inline constexpr const char* kLegacyManifestSeqKey = "restart_count";

// The handover's end marker in a chain directory, written by batond as the chain's owner once
// slurmctld says the job of `seq` ended (a dead node's, one that crashed): whatever final checkpoint
// that job wrote is committed, and none will follow, so a successor waiting for one restores at once.
// One small JSON object: `version` 1, `seq`, `job_id`, `state` (Slurm's), `time_unix`.
inline constexpr const char* kHandoverEndedFile = ".baton-handover-ended";
inline constexpr std::size_t kHandoverEndedMaxBytes = 4096;

// The handover's request in a chain directory, written by batond as the chain's owner when the job of
// `seq` is to take a final checkpoint and exit (its successor has started, or its owner preempts it),
// before any signal: a launcher between Slurm and the training (torchrun kills its ranks 30 s after a
// SIGTERM) never sees it. One small JSON object: `version` 1, `seq`, `job_id`, `time_unix`. A session
// of that seq and job reads it at most once per kHandoverRequestPollSeconds.
inline constexpr const char* kHandoverRequestFile = ".baton-handover-request";
inline constexpr std::size_t kHandoverRequestMaxBytes = 4096;
inline constexpr double kHandoverRequestPollSeconds = 1.0;

// BATON_OVERHEAD: checkpoint overhead target in percent, greater than kOverheadAbove and less than
// kOverheadBelow (fractions allowed).
inline constexpr double kOverheadAbove = 0;
inline constexpr double kOverheadBelow = 100;
inline constexpr double kOverheadDefault = 5;
constexpr bool overheadInRange(double percent)
{
    return percent > kOverheadAbove && percent < kOverheadBelow; // false for NaN
}

// BATON_DEADLINE_MARGIN: seconds, kMarginMin..kMarginMax (the plugin writes whole seconds; the
// checkpointer also accepts fractions).
inline constexpr double kMarginMin = 0;
inline constexpr double kMarginMax = 86400;
inline constexpr double kMarginDefault = 60;
constexpr bool marginInRange(double seconds)
{
    return seconds >= kMarginMin && seconds <= kMarginMax;
}

// BATON_KEEP: committed checkpoints to retain, a whole number kKeepMin..kKeepMax.
inline constexpr long long kKeepMin = 1;
inline constexpr long long kKeepMax = 1000;
inline constexpr long long kKeepDefault = 2;
constexpr bool keepInRange(long long keep)
{
    return keep >= kKeepMin && keep <= kKeepMax;
}

// BATON_HANDOVER_WAIT: seconds, kHandoverWaitMin..kHandoverWaitMax (the plugin writes whole seconds).
inline constexpr double kHandoverWaitMin = 0;
inline constexpr double kHandoverWaitMax = 3600;
constexpr bool handoverWaitInRange(double seconds)
{
    return seconds >= kHandoverWaitMin && seconds <= kHandoverWaitMax;
}

// Checkpoint directories: "ckpt-" and the iteration in decimal, zero-padded to 12 digits; an iteration
// of 10^12 or more takes as many digits as it has (at most 20, the largest 64-bit number).
inline constexpr std::string_view kCheckpointPrefix = "ckpt-";
inline constexpr std::size_t kCheckpointMinDigits = 12;
inline constexpr std::size_t kCheckpointMaxDigits = 20;

inline std::string checkpointDirName(std::uint64_t iteration)
{
    std::string digits;
    do {
        digits.insert(digits.begin(), static_cast<char>('0' + iteration % 10));
        iteration /= 10;
    } while (iteration != 0);
    if (digits.size() < kCheckpointMinDigits)
        digits.insert(0, kCheckpointMinDigits - digits.size(), '0');
    return std::string(kCheckpointPrefix) + digits;
}

// The iteration of a checkpoint directory name, only for the name checkpointDirName() gives that
// iteration: every iteration has exactly one name, and anything else ("ckpt-5", a 13-digit name with a
// leading zero, 21 digits, a value beyond 64 bits) is not a checkpoint to either side.
inline std::optional<std::uint64_t> parseCheckpointDirName(std::string_view name)
{
    if (name.substr(0, kCheckpointPrefix.size()) != kCheckpointPrefix)
        return std::nullopt;
    const std::string_view digits = name.substr(kCheckpointPrefix.size());
    if (digits.size() < kCheckpointMinDigits || digits.size() > kCheckpointMaxDigits)
        return std::nullopt;
    if (digits.size() > kCheckpointMinDigits && digits.front() == '0')
        return std::nullopt;
    std::uint64_t value = 0;
    for (const char c : digits) {
        if (c < '0' || c > '9')
            return std::nullopt;
        const auto digit = static_cast<std::uint64_t>(c - '0');
        if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
            return std::nullopt;
        value = value * 10 + digit;
    }
    return value;
}

// Chain names, one rule for the plugin (--baton=NAME, BATON_CHAIN), batond (POST /v1/chains, the
// events) and batonctl (submit --chain): 1..kChainNameMax characters of letters, digits, '.', '_' and '-', not starting with '.' or
// '-' (so that a name is never ".", "..", a hidden file or an option).
inline constexpr std::size_t kChainNameMax = 128;
constexpr bool isChainNameCharacter(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_'
        || c == '-';
}
constexpr bool validChainName(std::string_view name)
{
    if (name.empty() || name.size() > kChainNameMax || name.front() == '.' || name.front() == '-')
        return false;
    for (const char c : name)
        if (!isChainNameCharacter(c))
            return false;
    return true;
}
// The rule in words, for error messages: "must be " + chainNameRule().
inline std::string chainNameRule()
{
    return "1 to " + std::to_string(kChainNameMax)
        + " characters of letters, digits, '.', '_' and '-', not starting with '.' or '-'";
}

// A checkpoint as reported in an event (read by the plugin from a user-written manifest, stored by
// batond): each number is range-checked on both sides, so that no value a user writes can overflow a
// conversion or a database column. 2^53 keeps every value exact in a JSON double; created_unix lies
// between 1970 and the year 9999 (what PostgreSQL's to_timestamp takes).
inline constexpr double kReportedIntegerMax = 9007199254740992.0; // 2^53
inline constexpr double kCreatedUnixMax = 253402300799.0; // 9999-12-31T23:59:59Z
constexpr bool reportedIterationInRange(double iteration)
{
    return iteration >= 0 && iteration <= kReportedIntegerMax; // false for NaN
}
constexpr bool reportedBytesInRange(double bytes)
{
    return bytes >= 0 && bytes <= kReportedIntegerMax;
}
constexpr bool reportedCreatedInRange(double unixSeconds)
{
    return unixSeconds >= 0 && unixSeconds <= kCreatedUnixMax;
}

} // namespace baton::contract
