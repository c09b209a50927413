// Mirage's evaluation protocol on a simulated queue. At regularly spaced moments a predecessor job
// (runs to its limit) is inserted; while it runs, each policy decides every tick whether to submit a
// successor of the same shape; interruption = successor start - predecessor end (negative = overlap).
//
// Cost: every probe is a counterfactual. The base replay (without probes) is advanced once through the
// trace; at each probe moment its state is copied, the predecessor inserted and the copy stepped tick by
// tick through the predecessor's run to record what the policies see (pass 1). Each distinct
// submission time the policies choose then costs one more fork from the predecessor's start, run only
// until the successor starts or a horizon passes (pass 2).
#pragma once

#include "simulator.hpp"

#include "policy/gradient_policy.hpp"
#include "policy/policy.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace baton::sim {

struct ProtocolConfig {
    std::int64_t from = 0; // first probe moment (after the queue's warm-up)
    std::int64_t to = 0; // no probe at or after this moment
    std::int64_t interval = 4 * 3600;
    std::vector<int> shapes { 1, 8 };
    std::int64_t limit = 48 * 3600; // predecessor and successor limit
    // The successor's --time-min (0 = none): backfill may start it with a limit as short as this. A
    // baton chain can take that, since a shorter job only means one more checkpointed boundary.
    std::int64_t successorMinLimit = 0;
    double probePriority = 0; // their recorded-priority input (a typical job's, say)
    std::int64_t tick = 60; // how often the policies decide
    std::int64_t submitLead = 0; // batond's lead floor (see submitLeadFor); 0: none, Mirage's protocol
    std::int64_t horizon = 7 * 86400; // give up on a job that has not started this long after submission
    // Training data: every `sampleEvery` seconds of a predecessor's run, submit a successor in a fork
    // and record (features, wait). 0 = collect none.
    std::int64_t sampleEvery = 0;
    // If set, each tick is annotated with this predictor's mean log-wait (one batch per probe).
    std::shared_ptr<const WaitPredictor> annotate;
    // Also find, in hindsight, the submission tick whose successor starts closest to the predecessor's
    // end: the bound no submit-time policy can beat on this queue (one fork per tick: costly).
    bool oracle = false;
};

struct PolicyOutcome {
    std::int64_t submitted = 0;
    std::optional<std::int64_t> interruption; // none: the successor did not start within the horizon
    std::int64_t grantedLimit = 0; // the limit the successor started with (0: it did not start)
};

struct ProbeResult {
    std::int64_t insertedAt = 0;
    int nodes = 0;
    std::int64_t predecessorEnd = 0;
    std::vector<PolicyOutcome> outcomes; // one per policy, in the order given
    std::optional<PolicyOutcome> oracle; // with ProtocolConfig::oracle
};

struct ProtocolResult {
    std::vector<std::string> policyNames;
    std::vector<ProbeResult> probes;
    std::vector<WaitSample> samples; // in chronological order of submission
    std::size_t skippedProbes = 0; // predecessor never started within the horizon
    std::size_t forks = 0;
    double seconds = 0;
};

ProtocolResult runProtocol(std::shared_ptr<const std::vector<Job>> trace, const SchedulerConfig& scheduler,
    const ProtocolConfig& config, std::span<const Policy* const> policies);

// Mirage's metrics over a set of interruptions (seconds).
struct InterruptionMetrics {
    std::size_t count = 0;
    std::size_t unstarted = 0; // successors that never started within the horizon (excluded below)
    double mean = 0, median = 0, p90 = 0;
    double fractionZero = 0; // exactly 0
    double fractionWithin = 0; // |interruption| <= tolerance
    double meanOverlap = 0; // mean over all probes of max(-interruption, 0)
    double meanGap = 0; // mean over all probes of max(interruption, 0)
    // With baton's handover an early successor makes the predecessor checkpoint and exit: the chain
    // loses no time and the two jobs overlap only for the handover. Effective interruption =
    // max(interruption, 0); effective overlap = min(overlap, handover).
    double effectiveWithin = 0; // interruption <= tolerance (early starts count as handed over)
    double effectiveMeanOverlap = 0;
};

InterruptionMetrics summarize(
    std::span<const std::optional<std::int64_t>> interruptions, double tolerance, double handoverSeconds);

// Costs that choose a policy's quantile on training probes (lower is better); a successor that never
// started counts as a gap of `unstartedSeconds`.
// Symmetric (Mirage): a gap and an overlap waste the same: mean |interruption|, seconds per probe.
// Handover (baton): a gap is lost time and an early start costs one handover checkpoint; the overlap is
// not double allocation (the predecessor exits at the handover) but it shortens the predecessor's useful
// run, so a chain needs more jobs, hence more boundaries, to make the same progress. The cost is
// therefore a rate: lost seconds per boundary / useful seconds per job, scaled to one limit-length job:
//   limit * mean(max(x, 0) + handover * [x < 0]) / (limit - mean(max(-x, 0))).
double symmetricCost(std::span<const std::optional<std::int64_t>> interruptions, double unstartedSeconds);
double handoverCost(std::span<const std::optional<std::int64_t>> interruptions, double unstartedSeconds,
    double handoverSeconds, double limitSeconds);

// Mean raw overlap, mean over all probes of max(-interruption, 0) (an unstarted successor overlaps 0).
double meanOverlap(std::span<const std::optional<std::int64_t>> interruptions);

// The checkpoint-aware choice among candidate settings (one interruption column each): the lowest
// handoverCost among those whose mean raw overlap stays within `overlapBudgetSeconds`; if none does,
// the one with the least overlap. The handover makes an early start cheap for the chain, but the
// successor still holds nodes the cluster's other users are waiting for from its start, and every
// forfeited hour of the predecessor means more jobs, each with its own queue wait and boundary: an
// operator bounds that allocation, and the budget states the bound.
std::size_t chooseUnderOverlapBudget(std::span<const std::vector<std::optional<std::int64_t>>> candidates,
    double unstartedSeconds, double handoverSeconds, double limitSeconds, double overlapBudgetSeconds);

// The predict choice in the target's own terms: the candidate with the most successors within
// `tolerance` of the predecessor's end among those whose mean raw overlap stays within
// `overlapBudgetSeconds`; ties go to the lower symmetricCost, then to the earlier candidate. If none is
// within the budget, the one with the least overlap.
std::size_t chooseMostWithin(std::span<const std::vector<std::optional<std::int64_t>>> candidates,
    double tolerance, double unstartedSeconds, double overlapBudgetSeconds);

} // namespace baton::sim

namespace baton::sim {

// baton's chain-level metric. A training that needs `compute` seconds of compute runs as a chain of
// limit-length jobs; every boundary costs one checkpoint of `handover` seconds (the price the
// checkpointer measures for snapshot + persist). A successor that starts before its predecessor's
// limit triggers a handover: the predecessor stops training, persists its checkpoint and exits, and
// the successor resumes from it once persisted. A successor that starts later finds the checkpoint the
// predecessor wrote just before its limit, and the chain waits for the gap.
struct ChainConfig {
    std::int64_t compute = 7 * 86400;
    std::int64_t handover = 60;
    // Probe moments are split into this many contiguous runs, each replayed by its own thread; the
    // result does not depend on it. Policies must then be safe to call from several threads (const).
    int threads = 2;
    // Successors a chain keeps in the queue at once. With 2, while one successor waits the policy also
    // decides on the next, as if for a predecessor ending one limit later: a queue that waits longer
    // than a job then still starts each successor near its predecessor's end. The second one is
    // submitted only when the training needs it; should it start before the first, it is cancelled.
    int successorsInFlight = 1;
};

// One successor of a simulated chain: when the policy submitted it, when it started, and its
// predecessor's limit and end (the end is the handover when the successor started before the limit).
struct ChainHandover {
    std::int64_t submitted = 0, started = 0, predecessorLimitEnd = 0, predecessorEnd = 0;
};

struct ChainOutcome {
    bool finished = false; // every job started within the horizon and the training completed
    int jobs = 0; // jobs that started
    std::int64_t compute = 0; // seconds trained
    std::int64_t elapsed = 0; // first job's start to the end of the training (or of the last job)
    double idleNodeSeconds = 0; // node-seconds held by the chain's jobs while not training
    std::vector<ChainHandover> handovers; // in job order
};

// The accounting of one chain, fed the start of each job. Job k starts at s_k with limit L_k and
// resumes training at r_k (its start, or later if its predecessor's checkpoint is still being
// persisted). When its successor starts at s_{k+1}, job k has trained until
// c_k = max(r_k, min(s_{k+1}, s_k + L_k - handover)), persists for `handover` and exits at c_k + handover;
// the successor resumes at r_{k+1} = max(s_{k+1}, c_k + handover). Job k holds its nodes without training
// for (r_k - s_k) + handover. The last job stops when the training is complete.
class ChainLedger {
public:
    ChainLedger(std::int64_t compute, std::int64_t handover, int nodes);
    void firstJobStarted(std::int64_t at, std::int64_t limit);
    // Whether the running job cannot complete the training before it must checkpoint at its limit.
    bool needsSuccessor() const;
    // Whether the training needs a job after the running job's successor, too (one of `limit`).
    bool needsSecondSuccessor(std::int64_t limit) const;
    std::int64_t limitEnd() const { return start_ + limit_; }
    // The successor started at `at` with `limit`; returns when the predecessor ends (its nodes free).
    std::int64_t successorStarted(std::int64_t at, std::int64_t limit);
    // The running job completes the training (requires !needsSuccessor()); returns when.
    std::int64_t finish();
    const ChainOutcome& outcome() const { return outcome_; }

private:
    std::int64_t total_, handover_;
    int nodes_;
    std::int64_t first_ = 0, start_ = 0, limit_ = 0, resume_ = 0;
    ChainOutcome outcome_;
};

struct ChainResult {
    std::vector<std::string> policyNames;
    std::vector<std::vector<ChainOutcome>> chains; // [policy][chain], chains in probe order
    std::size_t skipped = 0; // probe moments whose first job did not start within the horizon
    double seconds = 0;
};

// A chain of `chain.compute` seconds of limit-length jobs for every probe moment in [config.from,
// config.to) and shape, one per policy: the first job is submitted at the probe moment; while each job
// runs the policy decides tick by tick when to submit its successor (the same decision points as
// runProtocol); the predecessor exits at the handover. Successors carry config.successorMinLimit.
ChainResult runChains(std::shared_ptr<const std::vector<Job>> trace, const SchedulerConfig& scheduler,
    const ProtocolConfig& config, const ChainConfig& chain, std::span<const Policy* const> policies);

struct ChainMetrics {
    std::size_t chains = 0; // finished chains (the figures below are over these)
    std::size_t unfinished = 0; // a job did not start within the horizon
    double efficiency = 0; // sum of compute / sum of elapsed wall-clock time
    double minEfficiency = 0; // the worst chain's
    double meanJobs = 0;
    double meanIdleNodeHours = 0; // per chain
};

ChainMetrics summarizeChains(std::span<const ChainOutcome> chains);

} // namespace baton::sim

namespace baton::sim {

// Training material for a learned submission policy (ProbeEpisode, gradient_policy.hpp): every probe's
// decision points in the last `window` seconds of the predecessor's run, every `decisionEvery` seconds.
std::vector<ProbeEpisode> collectEpisodes(std::shared_ptr<const std::vector<Job>> trace,
    const SchedulerConfig& scheduler, const ProtocolConfig& config, std::int64_t decisionEvery,
    std::int64_t window);

} // namespace baton::sim
