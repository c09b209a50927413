// The seeded fault schedule of the chaos test (chaos_test.cpp), with no cluster, database or clock of its
// own, so that chaos_model_test.cpp can test it alone.
//
// The schedule is a function of (seed, options) only: std::mt19937_64's output sequence is fixed by the
// standard, and every draw below maps it with plain integer arithmetic (no std::*_distribution, whose
// algorithms differ between standard libraries), so one seed gives the same faults, targets, variants and
// times on every build.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace baton::chaos {

enum class FaultKind {
    UserScancelCurrent, // the owner scancels the chain's running job
    UserScancelQueued, // the owner scancels the chain's queued successor
    OwnerAction, // pause / resume / cancel / resubmit by the owner (batonctl or HTTP: the variant says)
    OperatorAction, // the same by an operator (root's batonctl)
    RacingActions, // an owner's and an operator's action on one chain at the same moment
    ResubmitEndedName, // POST /v1/chains again with an existing chain's name
    HostileManifest, // a checkpoint manifest with out-of-range numbers in the chain directory
    HostileRegistry, // a huge, garbage .baton-jobs registry in the chain directory
    HostileSbatchArgs, // a chain created with --wait, --test-only, --uid=0 or --comment in its sbatch args
    ForgedComment, // another user submits a job whose --comment names the chain's next seq
    PlainSbatchChain, // a user starts a chain with plain `sbatch --baton=NAME` (no batonctl submit)
    BatondKill, // SIGKILL the active batond and start it again at once
    LeaderFailover, // SIGKILL the active batond and keep it down for a while: the standby takes over
    PostgresRestart, // stop PostgreSQL for a few seconds, start it again
    SlurmctldStop, // stop slurmctld for ~30 s, start it again
    SlurmctldFreeze, // SIGSTOP slurmctld past batond's Slurm timeout (a call that times out after slurmctld
                     // may have accepted it), then SIGCONT
    ForeignLocalDir, // the attacker (the last user) plants a valid checkpoint of his own in the node-local
                     // directory he prepared for another user before that user's first job
    StoppedChild, // batond's next Slurm calls for one owner are SIGSTOPped (a hung working directory or a
                  // stopped child): they time out while the other owners' calls must go on
    SpoolFlood, // an owner fills a chain's spool with many large checkpoint hints
    EventFlood, // a flood of one job's plugin events (a user's many srun steps), posted as the plugin does
};

inline constexpr std::pair<FaultKind, const char*> faultKindNames[] = {
    { FaultKind::UserScancelCurrent, "user_scancel_current" },
    { FaultKind::UserScancelQueued, "user_scancel_queued" },
    { FaultKind::OwnerAction, "owner_action" },
    { FaultKind::OperatorAction, "operator_action" },
    { FaultKind::RacingActions, "racing_actions" },
    { FaultKind::ResubmitEndedName, "resubmit_ended_name" },
    { FaultKind::HostileManifest, "hostile_manifest" },
    { FaultKind::HostileRegistry, "hostile_registry" },
    { FaultKind::HostileSbatchArgs, "hostile_sbatch_args" },
    { FaultKind::ForgedComment, "forged_comment" },
    { FaultKind::PlainSbatchChain, "plain_sbatch_chain" },
    { FaultKind::BatondKill, "batond_kill" },
    { FaultKind::LeaderFailover, "leader_failover" },
    { FaultKind::PostgresRestart, "postgres_restart" },
    { FaultKind::SlurmctldStop, "slurmctld_stop" },
    { FaultKind::SlurmctldFreeze, "slurmctld_freeze" },
    { FaultKind::ForeignLocalDir, "foreign_local_dir" },
    { FaultKind::StoppedChild, "stopped_child" },
    { FaultKind::SpoolFlood, "spool_flood" },
    { FaultKind::EventFlood, "event_flood" },
};

inline const char* nameOf(FaultKind kind)
{
    for (const auto& [k, name] : faultKindNames)
        if (k == kind)
            return name;
    return "unknown";
}

// Faults that take a whole service away: the only times a batond tick may fail as a whole.
inline bool isOutage(FaultKind kind)
{
    return kind == FaultKind::PostgresRestart || kind == FaultKind::SlurmctldStop
        || kind == FaultKind::SlurmctldFreeze;
}

struct Fault {
    double atSeconds = 0; // from the start of the chaos period; the injector starts it no earlier
    FaultKind kind = FaultKind::OwnerAction;
    int chain = 0; // target chain index (0 .. chains-1)
    int other = 0; // a second chain or user index where the fault needs one
    int variant = 0; // which action, manifest field, argument, interface ... (0 .. 63)
    double durationSeconds = 0; // outages and failovers: how long the service stays away
    bool operator==(const Fault&) const = default;
};

struct ScheduleOptions {
    double seconds = 360; // length of the chaos period
    double warmupSeconds = 40; // no fault before this: every chain has started
    double minGapSeconds = 4;
    double maxGapSeconds = 12;
    int chains = 12;
    int users = 3;
    // Outages are at most this many of each kind, and at least outageSpacing apart (from the end of one to
    // the start of the next), so that the checks can tell which failure belongs to which outage.
    int maxPostgresRestarts = 1;
    int maxSlurmctldStops = 1;
    int maxSlurmctldFreezes = 1;
    double outageSpacingSeconds = 60;
    int maxHostileManifests = 2;
    int maxHostileRegistries = 1;
    int maxPlainSbatchChains = 1;
    int maxForeignLocalDirs = 2;
    int maxStoppedChildren = 2;
    int maxSpoolFloods = 1;
    int maxEventFloods = 1;
};

// Uniform integer in [0, n) from the engine's raw output: the same on every standard library.
inline std::uint64_t draw(std::mt19937_64& engine, std::uint64_t n)
{
    if (n <= 1)
        return 0;
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n; // reject the biased tail
    for (;;) {
        const std::uint64_t value = engine();
        if (value < limit)
            return value % n;
    }
}

// Uniform in [low, high] with millisecond resolution.
inline double drawSeconds(std::mt19937_64& engine, double low, double high)
{
    const auto span = static_cast<std::uint64_t>(std::max(0.0, (high - low) * 1000.0));
    return low + static_cast<double>(draw(engine, span + 1)) / 1000.0;
}

// Relative weights of the kinds; outages and one-off hostile inputs are also capped by count.
inline constexpr std::pair<FaultKind, int> faultWeights[] = {
    { FaultKind::UserScancelCurrent, 4 },
    { FaultKind::UserScancelQueued, 4 },
    { FaultKind::OwnerAction, 6 },
    { FaultKind::OperatorAction, 3 },
    { FaultKind::RacingActions, 3 },
    { FaultKind::ResubmitEndedName, 3 },
    { FaultKind::HostileManifest, 2 },
    { FaultKind::HostileRegistry, 1 },
    { FaultKind::HostileSbatchArgs, 2 },
    { FaultKind::ForgedComment, 2 },
    { FaultKind::PlainSbatchChain, 1 },
    { FaultKind::BatondKill, 3 },
    { FaultKind::LeaderFailover, 2 },
    { FaultKind::PostgresRestart, 2 },
    { FaultKind::SlurmctldStop, 2 },
    { FaultKind::SlurmctldFreeze, 2 },
    { FaultKind::ForeignLocalDir, 2 },
    { FaultKind::StoppedChild, 2 },
    { FaultKind::SpoolFlood, 1 },
    { FaultKind::EventFlood, 1 },
};

// How long a fault of these kinds lasts: uniform in [low, high] seconds; the others take no time.
struct DurationRange {
    FaultKind kind;
    double low, high;
};
inline constexpr DurationRange faultDurations[] = {
    { FaultKind::PostgresRestart, 4, 12 },
    { FaultKind::SlurmctldStop, 28, 34 },
    { FaultKind::SlurmctldFreeze, 14, 20 },
    { FaultKind::LeaderFailover, 10, 25 },
    { FaultKind::BatondKill, 0, 2 },
    { FaultKind::StoppedChild, 30, 60 }, // the window in which the owner's next two calls are stopped
};

// How many faults of a kind one schedule may hold.
inline int capOf(FaultKind kind, const ScheduleOptions& options)
{
    switch (kind) {
    case FaultKind::PostgresRestart:
        return options.maxPostgresRestarts;
    case FaultKind::SlurmctldStop:
        return options.maxSlurmctldStops;
    case FaultKind::SlurmctldFreeze:
        return options.maxSlurmctldFreezes;
    case FaultKind::HostileManifest:
        return options.maxHostileManifests;
    case FaultKind::HostileRegistry:
        return options.maxHostileRegistries;
    case FaultKind::PlainSbatchChain:
        return options.maxPlainSbatchChains;
    case FaultKind::ForeignLocalDir:
        return options.maxForeignLocalDirs;
    case FaultKind::StoppedChild:
        return options.maxStoppedChildren;
    case FaultKind::SpoolFlood:
        return options.maxSpoolFloods;
    case FaultKind::EventFlood:
        return options.maxEventFloods;
    default:
        return 1 << 30;
    }
}

// The kind of a fault at `t`. A kind over its cap, or an outage too close to the last one, is drawn
// again (a bounded number of times, then an owner action): every redraw consumes the engine the same
// way for one seed.
inline FaultKind drawKind(std::mt19937_64& engine, double t, double lastOutageEnd,
    const std::map<FaultKind, int>& counts, const ScheduleOptions& options)
{
    int total = 0;
    for (const auto& [kind, weight] : faultWeights)
        total += weight;
    for (int attempt = 0; attempt < 16; ++attempt) {
        auto pick = static_cast<int>(draw(engine, static_cast<std::uint64_t>(total)));
        FaultKind kind = faultWeights[0].first;
        for (const auto& [k, weight] : faultWeights) {
            if (pick < weight) {
                kind = k;
                break;
            }
            pick -= weight;
        }
        const auto counted = counts.find(kind);
        if ((counted == counts.end() ? 0 : counted->second) >= capOf(kind, options))
            continue;
        if (isOutage(kind) && t - lastOutageEnd < options.outageSpacingSeconds)
            continue;
        return kind;
    }
    return FaultKind::OwnerAction;
}

inline double drawDuration(std::mt19937_64& engine, FaultKind kind)
{
    for (const DurationRange& range : faultDurations)
        if (range.kind == kind)
            return drawSeconds(engine, range.low, range.high);
    return 0;
}

inline std::vector<Fault> makeSchedule(std::uint64_t seed, const ScheduleOptions& options)
{
    std::mt19937_64 engine(seed);
    std::vector<Fault> schedule;
    std::map<FaultKind, int> counts;
    double lastOutageEnd = -1e9;
    double t = options.warmupSeconds;
    for (;;) {
        t += drawSeconds(engine, options.minGapSeconds, options.maxGapSeconds);
        if (t >= options.seconds)
            break;
        Fault fault;
        fault.atSeconds = t;
        fault.kind = drawKind(engine, t, lastOutageEnd, counts, options);
        fault.chain = static_cast<int>(draw(engine, static_cast<std::uint64_t>(options.chains)));
        fault.other = static_cast<int>(draw(engine, static_cast<std::uint64_t>(std::max(options.chains, options.users))));
        fault.variant = static_cast<int>(draw(engine, 64));
        fault.durationSeconds = drawDuration(engine, fault.kind);
        if (isOutage(fault.kind)) {
            lastOutageEnd = t + fault.durationSeconds;
            t = lastOutageEnd; // the next fault comes after this one's service is back
        }
        ++counts[fault.kind];
        schedule.push_back(fault);
    }
    return schedule;
}

inline std::string describe(const Fault& fault)
{
    std::ostringstream out;
    out.setf(std::ios::fixed);
    out.precision(1);
    out << "t+" << fault.atSeconds << "s " << nameOf(fault.kind) << " chain=" << fault.chain
        << " other=" << fault.other << " variant=" << fault.variant;
    if (fault.durationSeconds > 0)
        out << " for " << fault.durationSeconds << "s";
    return out.str();
}

} // namespace baton::chaos
