#include "protocol.hpp"

#include "validation.hpp"

#include "policy/features_of.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <stdexcept>
#include <thread>
#include <utility>

namespace baton::sim {

namespace {

constexpr std::int64_t predecessorId = -1;
constexpr std::int64_t successorId = -2;

// What a policy sees at `t`, the simulator advanced there, about a job of `shape` whose run ends at `end`.
DecisionPoint decisionPointAt(
    const Simulator& sim, std::int64_t t, std::int64_t end, const JobShape& shape, bool withFeatures = true)
{
    DecisionPoint p;
    p.now = t;
    p.remaining = end - t;
    p.limit = shape.limit;
    if (withFeatures)
        p.features = featuresOf(sim, shape);
    p.recentMeanWait = sim.recentMeanWait();
    return p;
}

Job probeJob(std::int64_t id, std::int64_t submit, int nodes, const ProtocolConfig& config)
{
    const std::int64_t limit = config.limit;
    Job j;
    j.recordedPriority = config.probePriority;
    j.id = id;
    j.submit = submit;
    j.nodes = nodes;
    j.limit = limit;
    j.runTime = limit; // a chain member always runs into its limit
    if (id == successorId)
        j.minLimit = config.successorMinLimit;
    return j;
}

struct SuccessorStart {
    std::int64_t wait = 0;
    std::int64_t grantedLimit = 0;
};

// Submits a successor into a fork of `sim` (at sim.now()) and returns how it started, if it did by
// the horizon or by `until`, whichever is earlier.
std::optional<SuccessorStart> successorStart(const Simulator& sim, int nodes, const ProtocolConfig& config,
    std::size_t& forks, std::int64_t until = std::numeric_limits<std::int64_t>::max())
{
    ++forks;
    Simulator f = sim.fork();
    f.submit(probeJob(successorId, f.now(), nodes, config));
    const auto start = f.runUntilStarted(successorId, std::min(f.now() + config.horizon, until));
    if (!start)
        return std::nullopt;
    return SuccessorStart { *start - sim.now(), *f.grantedLimitOf(successorId) };
}

// The submission tick (or the predecessor's end) whose successor starts closest to `predEnd`;
// on a tie the earlier submission. The search stops at the first exact hit.
PolicyOutcome hindsightBest(const Simulator& atStart, std::int64_t predStart, std::int64_t predEnd, int nodes,
    const ProtocolConfig& config, std::size_t& forks)
{
    PolicyOutcome best { predEnd, std::nullopt };
    Simulator walker = atStart.fork();
    auto consider = [&](std::int64_t t) {
        // A successor that starts |best| or more after predEnd cannot do better: its run stops there
        // (the answer is the same; on Lublin's long queue this saves about a tenth).
        std::int64_t until = std::numeric_limits<std::int64_t>::max();
        if (best.interruption)
            until = predEnd + std::abs(*best.interruption) - 1;
        if (t > until)
            return;
        walker.advanceTo(t);
        const auto started = successorStart(walker, nodes, config, forks, until);
        if (!started)
            return;
        const std::int64_t x = t + started->wait - predEnd;
        if (!best.interruption || std::abs(x) < std::abs(*best.interruption))
            best = { t, x, started->grantedLimit };
    };
    for (std::int64_t t = predStart; t < predEnd && best.interruption != 0; t += config.tick)
        consider(t);
    if (best.interruption != 0)
        consider(predEnd);
    return best;
}

void runProbe(Simulator probe, int nodes, const ProtocolConfig& config,
    std::span<const Policy* const> policies, ProtocolResult& result)
{
    const std::int64_t insertedAt = probe.now();
    probe.submit(probeJob(predecessorId, insertedAt, nodes, config));
    const auto predStart = probe.runUntilStarted(predecessorId, insertedAt + config.horizon);
    if (!predStart) {
        ++result.skippedProbes;
        return;
    }
    probe.advanceTo(*predStart);
    const std::int64_t predEnd = *predStart + config.limit;
    const Simulator atStart = probe.fork();
    const JobShape shape { nodes, config.limit };

    // Pass 1: what the policies see on every tick of the predecessor's run.
    std::vector<DecisionPoint> points;
    points.reserve(static_cast<std::size_t>(config.limit / config.tick) + 1);
    for (std::int64_t t = *predStart; t < predEnd; t += config.tick) {
        const bool sampleHere = config.sampleEvery > 0 && (t - *predStart) % config.sampleEvery == 0;
        if (policies.empty() && !sampleHere)
            continue; // collecting training data only: no need to look at every tick
        probe.advanceTo(t);
        const DecisionPoint p = decisionPointAt(probe, t, predEnd, shape);
        points.push_back(p);
        if (sampleHere) {
            if (auto started = successorStart(probe, nodes, config, result.forks))
                result.samples.push_back({ p.features, static_cast<double>(started->wait) });
        }
    }
    if (config.annotate) {
        std::vector<Features> rows;
        rows.reserve(points.size());
        for (const auto& p : points)
            rows.push_back(p.features);
        const auto meanLog = config.annotate->predictLog(rows);
        for (std::size_t i = 0; i < points.size(); ++i)
            points[i].meanLogWait = meanLog[i];
    }

    if (policies.empty() && !config.oracle)
        return;
    // Pass 2: one fork per distinct submission time, in time order from the predecessor's start.
    ProbeResult r;
    r.insertedAt = insertedAt;
    r.nodes = nodes;
    r.predecessorEnd = predEnd;
    std::map<std::int64_t, PolicyOutcome> outcomeBySubmit;
    for (const Policy* policy : policies) {
        const std::size_t i
            = firstSubmitWithLead(*policy, points, submitLeadFor(config.submitLead, config.limit));
        const std::int64_t submitted = i < points.size() ? points[i].now : predEnd;
        PolicyOutcome pending;
        pending.submitted = submitted;
        outcomeBySubmit.emplace(submitted, pending);
        r.outcomes.push_back(pending);
    }
    Simulator walker = atStart.fork();
    for (auto& [submitted, outcome] : outcomeBySubmit) {
        walker.advanceTo(submitted);
        if (auto started = successorStart(walker, nodes, config, result.forks)) {
            outcome.interruption = submitted + started->wait - predEnd;
            outcome.grantedLimit = started->grantedLimit;
        }
    }
    for (auto& o : r.outcomes)
        o = outcomeBySubmit.at(o.submitted);
    if (config.oracle)
        r.oracle = hindsightBest(atStart, *predStart, predEnd, nodes, config, result.forks);
    result.probes.push_back(std::move(r));
}

} // namespace

ProtocolResult runProtocol(std::shared_ptr<const std::vector<Job>> trace, const SchedulerConfig& scheduler,
    const ProtocolConfig& config, std::span<const Policy* const> policies)
{
    const auto t0 = std::chrono::steady_clock::now();
    ProtocolResult result;
    for (const Policy* p : policies)
        result.policyNames.push_back(p->name());
    Simulator base(std::move(trace), scheduler);
    for (std::int64_t at = config.from; at < config.to; at += config.interval) {
        base.advanceTo(at);
        for (int nodes : config.shapes)
            runProbe(base.fork(), nodes, config, policies, result);
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

InterruptionMetrics summarize(
    std::span<const std::optional<std::int64_t>> interruptions, double tolerance, double handoverSeconds)
{
    InterruptionMetrics m;
    std::vector<double> x;
    for (const auto& i : interruptions) {
        if (i)
            x.push_back(static_cast<double>(*i));
        else
            ++m.unstarted;
    }
    m.count = x.size();
    if (x.empty())
        return m;
    const auto n = static_cast<double>(x.size());
    double sum = 0, overlap = 0, gap = 0, effOverlap = 0;
    std::size_t zero = 0, within = 0, effWithin = 0;
    for (double v : x) {
        sum += v;
        overlap += std::max(-v, 0.0);
        gap += std::max(v, 0.0);
        effOverlap += std::min(std::max(-v, 0.0), handoverSeconds);
        zero += v == 0 ? 1 : 0;
        within += std::abs(v) <= tolerance ? 1 : 0;
        effWithin += v <= tolerance ? 1 : 0;
    }
    m.mean = sum / n;
    m.median = quantile(x, 0.5);
    m.p90 = quantile(x, 0.9);
    m.fractionZero = static_cast<double>(zero) / n;
    m.fractionWithin = static_cast<double>(within) / n;
    m.meanOverlap = overlap / n;
    m.meanGap = gap / n;
    m.effectiveWithin = static_cast<double>(effWithin) / n;
    m.effectiveMeanOverlap = effOverlap / n;
    return m;
}

double symmetricCost(std::span<const std::optional<std::int64_t>> interruptions, double unstartedSeconds)
{
    if (interruptions.empty())
        return 0;
    double cost = 0;
    for (const auto& i : interruptions)
        cost += i ? std::abs(static_cast<double>(*i)) : unstartedSeconds;
    return cost / static_cast<double>(interruptions.size());
}

double handoverCost(std::span<const std::optional<std::int64_t>> interruptions, double unstartedSeconds,
    double handoverSeconds, double limitSeconds)
{
    if (interruptions.empty())
        return 0;
    double lost = 0, forfeited = 0;
    for (const auto& i : interruptions) {
        if (!i)
            lost += unstartedSeconds;
        else if (*i >= 0)
            lost += static_cast<double>(*i);
        else {
            lost += handoverSeconds;
            forfeited += std::min(static_cast<double>(-*i), limitSeconds);
        }
    }
    const auto n = static_cast<double>(interruptions.size());
    const double useful = std::max(limitSeconds - forfeited / n, 1.0);
    return limitSeconds * (lost / n) / useful;
}

double meanOverlap(std::span<const std::optional<std::int64_t>> interruptions)
{
    if (interruptions.empty())
        return 0;
    double overlap = 0;
    for (const auto& i : interruptions)
        if (i && *i < 0)
            overlap += static_cast<double>(-*i);
    return overlap / static_cast<double>(interruptions.size());
}

namespace {

using Columns = std::span<const std::vector<std::optional<std::int64_t>>>;

// The candidate with the lowest `cost` (compared as a tuple; ties to the earlier candidate) among those
// whose mean raw overlap stays within the budget; if none does, the one with the least overlap.
template<typename Cost> std::size_t cheapestWithinOverlapBudget(Columns candidates, double budget, Cost cost)
{
    std::size_t best = candidates.size(), leastOverlap = 0;
    decltype(cost(candidates[0])) bestCost {};
    double least = 0;
    for (std::size_t k = 0; k < candidates.size(); ++k) {
        const double overlap = meanOverlap(candidates[k]);
        if (k == 0 || overlap < least) {
            least = overlap;
            leastOverlap = k;
        }
        if (overlap > budget)
            continue;
        const auto c = cost(candidates[k]);
        if (best == candidates.size() || c < bestCost) {
            bestCost = c;
            best = k;
        }
    }
    return best < candidates.size() ? best : leastOverlap;
}

} // namespace

std::size_t chooseUnderOverlapBudget(Columns candidates, double unstartedSeconds, double handoverSeconds,
    double limitSeconds, double overlapBudgetSeconds)
{
    return cheapestWithinOverlapBudget(candidates, overlapBudgetSeconds, [&](const auto& column) {
        return handoverCost(column, unstartedSeconds, handoverSeconds, limitSeconds);
    });
}

std::size_t chooseMostWithin(
    Columns candidates, double tolerance, double unstartedSeconds, double overlapBudgetSeconds)
{
    return cheapestWithinOverlapBudget(candidates, overlapBudgetSeconds, [&](const auto& column) {
        return std::pair { -summarize(column, tolerance, 0).fractionWithin,
            symmetricCost(column, unstartedSeconds) };
    });
}

} // namespace baton::sim

namespace baton::sim {

ChainLedger::ChainLedger(std::int64_t compute, std::int64_t handover, int nodes)
    : total_(compute)
    , handover_(handover)
    , nodes_(nodes)
{
    if (compute <= 0 || handover < 0 || nodes <= 0)
        throw std::invalid_argument("a chain needs positive compute and nodes and a handover price >= 0");
}

void ChainLedger::firstJobStarted(std::int64_t at, std::int64_t limit)
{
    if (limit <= handover_)
        throw std::invalid_argument("a job's limit must exceed the handover price");
    first_ = start_ = resume_ = at;
    limit_ = limit;
    outcome_ = {};
    outcome_.jobs = 1;
}

bool ChainLedger::needsSuccessor() const
{
    return total_ - outcome_.compute > limitEnd() - handover_ - resume_;
}

bool ChainLedger::needsSecondSuccessor(std::int64_t limit) const
{
    return total_ - outcome_.compute > (limitEnd() - handover_ - resume_) + (limit - handover_);
}

std::int64_t ChainLedger::successorStarted(std::int64_t at, std::int64_t limit)
{
    if (limit <= handover_)
        throw std::invalid_argument("a job's limit must exceed the handover price");
    const std::int64_t stop = std::max(resume_, std::min(at, limitEnd() - handover_));
    const std::int64_t end = stop + handover_;
    outcome_.compute += stop - resume_;
    outcome_.idleNodeSeconds
        += static_cast<double>(nodes_) * static_cast<double>(resume_ - start_ + handover_);
    start_ = at;
    limit_ = limit;
    resume_ = std::max(at, end);
    ++outcome_.jobs;
    outcome_.elapsed = end - first_;
    return end;
}

std::int64_t ChainLedger::finish()
{
    if (needsSuccessor())
        throw std::logic_error("the running job cannot complete the training");
    const std::int64_t end = resume_ + (total_ - outcome_.compute);
    outcome_.idleNodeSeconds += static_cast<double>(nodes_) * static_cast<double>(resume_ - start_);
    outcome_.compute = total_;
    outcome_.elapsed = end - first_;
    outcome_.finished = true;
    return end;
}

namespace {

Job chainJob(
    std::int64_t id, std::int64_t submit, int nodes, std::int64_t minLimit, const ProtocolConfig& config)
{
    Job j;
    j.id = id;
    j.submit = submit;
    j.nodes = nodes;
    j.limit = config.limit;
    j.runTime = config.limit; // until the handover or the end of the training cuts it (endRunningAt)
    j.minLimit = minLimit;
    j.recordedPriority = config.probePriority;
    return j;
}

constexpr std::int64_t firstChainJobId = -100;

// One chain per policy from the probe moment `base.now()`.
void runChainsAt(const Simulator& base, int nodes, const ProtocolConfig& config, const ChainConfig& chain,
    std::span<const Policy* const> policies, ChainResult& result)
{
    Simulator first = base.fork();
    const std::int64_t at = first.now();
    first.submit(chainJob(firstChainJobId, at, nodes, 0, config));
    const auto firstStart = first.runUntilStarted(firstChainJobId, at + config.horizon);
    if (!firstStart) {
        ++result.skipped;
        return;
    }
    const JobShape shape { nodes, config.limit };
    for (std::size_t k = 0; k < policies.size(); ++k) {
        const Policy& policy = *policies[k];
        const bool features = policy.needsFeatures();
        Simulator sim = first.fork();
        ChainLedger ledger(chain.compute, chain.handover, nodes);
        ledger.firstJobStarted(*firstStart, config.limit);
        std::int64_t running = firstChainJobId, lastId = firstChainJobId;
        constexpr double unknown = std::numeric_limits<double>::quiet_NaN();
        double runningWaited = unknown; // as a successor: the first job is its owner's
        struct Queued {
            std::int64_t id, submitted;
        };
        std::optional<Queued> queued; // a second successor, submitted while the one before it waited
        bool stalled = false;
        std::vector<ChainHandover> handovers;
        // What the policy sees on every tick in [from, until) of a fork (nothing is submitted in it) about a
        // predecessor that reaches its limit at `limitEnd`; up to the tick at which job `waiting` started.
        // `lastWait`: the DecisionPoint's lastSuccessorWait.
        const auto ticks = [&](std::int64_t from, std::int64_t until, std::int64_t limitEnd, double lastWait,
                               std::optional<std::int64_t> waiting) {
            std::vector<DecisionPoint> points;
            Simulator look = sim.fork();
            for (std::int64_t t = std::max(look.now(), from); t < until; t += config.tick) {
                look.advanceTo(t);
                if (waiting && look.startOf(*waiting))
                    break;
                points.push_back(decisionPointAt(look, t, limitEnd, shape, features));
                points.back().lastSuccessorWait = lastWait;
            }
            return points;
        };
        while (ledger.needsSuccessor()) {
            const std::int64_t end = ledger.limitEnd();
            std::int64_t next = 0, submitted = 0;
            if (queued) {
                next = queued->id;
                submitted = queued->submitted;
                queued.reset();
            } else {
                // Of the running job.
                const auto points = ticks(sim.now(), end, end, runningWaited, std::nullopt);
                const std::size_t i
                    = firstSubmitWithLead(policy, points, submitLeadFor(config.submitLead, config.limit));
                submitted = i < points.size() ? points[i].now : end;
                sim.advanceTo(submitted);
                next = --lastId;
                sim.submit(chainJob(next, submitted, nodes, config.successorMinLimit, config));
            }
            if (chain.successorsInFlight > 1 && ledger.needsSecondSuccessor(config.limit)) {
                // While `next` waits, the policy decides on the job after it as on a predecessor that
                // reaches its limit one limit after the running one: the ticks until `next` starts
                // (not past that limit: a successor still waiting then is followed as usual).
                // From the tick after the successor's submission, as batond decides (the chain is then
                // in successor_pending).
                const std::int64_t secondEnd = end + config.limit;
                const auto points
                    = ticks(submitted + config.tick, std::min(secondEnd, submitted + config.horizon), secondEnd,
                        unknown, next);
                if (const std::size_t i = policy.firstSubmit(points); i < points.size()) {
                    sim.advanceTo(points[i].now);
                    queued = Queued { --lastId, points[i].now };
                    sim.submit(chainJob(queued->id, queued->submitted, nodes, config.successorMinLimit, config));
                }
            }
            const auto started = sim.runUntilStarted(next, submitted + config.horizon);
            if (!started) {
                stalled = true;
                break;
            }
            if (queued && sim.startOf(queued->id)) {
                // It started before the successor it was to follow (a queue of one priority order
                // rarely does that): cancelled, as batond does.
                sim.endRunningAt(queued->id, sim.now());
                queued.reset();
            }
            const std::int64_t predecessorEnd = ledger.successorStarted(*started, *sim.grantedLimitOf(next));
            handovers.push_back({ submitted, *started, end, predecessorEnd });
            sim.endRunningAt(running, predecessorEnd);
            running = next;
            runningWaited = static_cast<double>(*started - submitted);
        }
        if (!stalled)
            ledger.finish();
        ChainOutcome outcome = ledger.outcome();
        outcome.handovers = std::move(handovers);
        result.chains[k].push_back(std::move(outcome));
    }
}

} // namespace

ChainResult runChains(std::shared_ptr<const std::vector<Job>> trace, const SchedulerConfig& scheduler,
    const ProtocolConfig& config, const ChainConfig& chain, std::span<const Policy* const> policies)
{
    const auto t0 = std::chrono::steady_clock::now();
    if (chain.threads < 1)
        throw std::invalid_argument("chains need at least one thread");
    std::vector<std::int64_t> moments;
    for (std::int64_t at = config.from; at < config.to; at += config.interval)
        moments.push_back(at);
    // Each thread replays the base queue to its own run of moments: chains are independent given the
    // trace, so the split changes only the wall-clock time.
    const std::size_t parts = std::min<std::size_t>(static_cast<std::size_t>(chain.threads), moments.size());
    std::vector<ChainResult> partial(std::max<std::size_t>(parts, 1));
    std::vector<std::exception_ptr> errors(partial.size());
    auto runPart = [&](std::size_t part) {
        try {
            ChainResult& r = partial[part];
            r.chains.resize(policies.size());
            Simulator base(trace, scheduler);
            const std::size_t begin = moments.size() * part / partial.size();
            const std::size_t end = moments.size() * (part + 1) / partial.size();
            for (std::size_t m = begin; m < end; ++m) {
                base.advanceTo(moments[m]);
                for (int nodes : config.shapes)
                    runChainsAt(base, nodes, config, chain, policies, r);
            }
        } catch (...) {
            errors[part] = std::current_exception();
        }
    };
    {
        std::vector<std::jthread> workers;
        for (std::size_t part = 1; part < partial.size(); ++part)
            workers.emplace_back(runPart, part);
        runPart(0);
    }
    for (const auto& e : errors)
        if (e)
            std::rethrow_exception(e);
    ChainResult result;
    for (const Policy* p : policies)
        result.policyNames.push_back(p->name());
    result.chains.resize(policies.size());
    for (auto& r : partial) {
        result.skipped += r.skipped;
        for (std::size_t k = 0; k < r.chains.size(); ++k)
            result.chains[k].insert(result.chains[k].end(), r.chains[k].begin(), r.chains[k].end());
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

ChainMetrics summarizeChains(std::span<const ChainOutcome> chains)
{
    ChainMetrics m;
    double compute = 0, elapsed = 0, jobs = 0, idle = 0;
    m.minEfficiency = 1;
    for (const auto& c : chains) {
        if (!c.finished) {
            ++m.unfinished;
            continue;
        }
        ++m.chains;
        compute += static_cast<double>(c.compute);
        elapsed += static_cast<double>(c.elapsed);
        jobs += c.jobs;
        idle += c.idleNodeSeconds;
        m.minEfficiency
            = std::min(m.minEfficiency, static_cast<double>(c.compute) / static_cast<double>(c.elapsed));
    }
    if (m.chains == 0) {
        m.minEfficiency = 0;
        return m;
    }
    const auto n = static_cast<double>(m.chains);
    m.efficiency = compute / elapsed;
    m.meanJobs = jobs / n;
    m.meanIdleNodeHours = idle / n / 3600;
    return m;
}

} // namespace baton::sim

namespace baton::sim {

std::vector<ProbeEpisode> collectEpisodes(std::shared_ptr<const std::vector<Job>> trace,
    const SchedulerConfig& scheduler, const ProtocolConfig& config, std::int64_t decisionEvery,
    std::int64_t window)
{
    if (decisionEvery <= 0 || window <= 0)
        throw std::invalid_argument("episodes need a positive decision spacing and window");
    std::vector<ProbeEpisode> episodes;
    std::size_t forks = 0;
    Simulator base(std::move(trace), scheduler);
    for (std::int64_t at = config.from; at < config.to; at += config.interval) {
        base.advanceTo(at);
        for (int nodes : config.shapes) {
            Simulator probe = base.fork();
            probe.submit(probeJob(predecessorId, at, nodes, config));
            const auto predStart = probe.runUntilStarted(predecessorId, at + config.horizon);
            if (!predStart)
                continue;
            const std::int64_t predEnd = *predStart + config.limit;
            const JobShape shape { nodes, config.limit };
            ProbeEpisode e;
            e.nodes = nodes;
            // The first decision lies a whole number of spacings before the end, as in decide().
            const std::int64_t first
                = predEnd - std::min(window, config.limit) / decisionEvery * decisionEvery;
            for (std::int64_t t = std::max(first, *predStart); t < predEnd; t += decisionEvery) {
                probe.advanceTo(t);
                e.points.push_back(decisionPointAt(probe, t, predEnd, shape));
                const auto started = successorStart(probe, nodes, config, forks);
                e.interruptions.push_back(
                    started ? std::optional(t + started->wait - predEnd) : std::nullopt);
            }
            probe.advanceTo(predEnd);
            const auto started = successorStart(probe, nodes, config, forks);
            e.interruptions.push_back(started ? std::optional(started->wait) : std::nullopt);
            episodes.push_back(std::move(e));
        }
    }
    return episodes;
}

} // namespace baton::sim
