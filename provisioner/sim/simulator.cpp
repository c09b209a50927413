#include "simulator.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace baton::sim {

namespace {
constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();
}

std::size_t prepareTrace(std::vector<Job>& jobs, int clusterNodes, Dropped* dropped)
{
    const auto before = jobs.size();
    Dropped counts;
    std::erase_if(jobs, [&](const Job& j) {
        if (j.nodes <= 0 || j.limit <= 0) {
            ++counts.invalid;
            return true;
        }
        if (j.nodes > clusterNodes) {
            ++counts.neverFit;
            return true;
        }
        return false;
    });
    if (dropped)
        *dropped = counts;
    for (auto& j : jobs)
        j.runTime = std::clamp<std::int64_t>(j.runTime, 0, j.limit);
    std::stable_sort(jobs.begin(), jobs.end(),
        [](const Job& a, const Job& b) { return a.submit != b.submit ? a.submit < b.submit : a.id < b.id; });
    return before - jobs.size();
}

Simulator::Simulator(std::shared_ptr<const std::vector<Job>> trace, SchedulerConfig config)
    : trace_(std::move(trace))
    , config_(config)
    , freeNodes_(config.nodes)
{
    if (config_.nodes <= 0)
        throw std::invalid_argument("the cluster needs at least one node");
    if (!trace_)
        throw std::invalid_argument("no trace given");
    now_ = trace_->empty() ? 0 : trace_->front().submit;
    // Dependencies by trace index; one that names a job not in the trace (dropped) is ignored.
    std::vector<std::int64_t> after;
    std::unordered_map<std::int64_t, std::int64_t> indexOf;
    for (std::size_t i = 0; i < trace_->size(); ++i) {
        const auto afterId = (*trace_)[i].afterId;
        if (afterId < 0)
            continue;
        if (after.empty()) {
            after.assign(trace_->size(), -1);
            for (std::size_t k = 0; k < trace_->size(); ++k)
                indexOf.emplace((*trace_)[k].id, static_cast<std::int64_t>(k));
        }
        if (auto it = indexOf.find(afterId);
            it != indexOf.end() && it->second != static_cast<std::int64_t>(i))
            after[i] = it->second;
    }
    if (!after.empty()) {
        afterIndex_ = std::make_shared<const std::vector<std::int64_t>>(std::move(after));
        endedAt_.assign(trace_->size(), -1);
    }
}

Simulator Simulator::fork() const
{
    Simulator copy(*this);
    copy.startLog_ = nullptr;
    return copy;
}

double Simulator::priorityOf(const Job& job, std::int64_t at) const
{
    return priority(job, job.submit, at);
}

double Simulator::priority(const Job& job, std::int64_t ageSince, std::int64_t at) const
{
    const double age = static_cast<double>(std::max<std::int64_t>(at - ageSince, 0));
    const double ageFactor = std::min(age / static_cast<double>(config_.maxAge), 1.0);
    return config_.ageWeight * ageFactor + config_.sizeWeight * job.nodes / config_.nodes
        + config_.recordedWeight * job.recordedPriority;
}

double Simulator::recentMeanWait() const
{
    return recentCount_ == 0 ? 0.0 : recentSum_ / static_cast<double>(std::min(recentCount_, waitWindow));
}

std::int64_t Simulator::nextEventTime() const
{
    std::int64_t t = never;
    if (nextArrival_ < trace_->size())
        t = (*trace_)[nextArrival_].submit;
    if (!extraArrivals_.empty())
        t = std::min(t, extraArrivals_.front().submit);
    for (const auto& r : running_)
        t = std::min(t, r.end);
    return t;
}

bool Simulator::finished() const
{
    return nextEventTime() == never && pending_.empty();
}

void Simulator::submit(const Job& job)
{
    if (job.nodes <= 0 || job.nodes > config_.nodes || job.limit <= 0)
        throw std::invalid_argument("job does not fit the simulated cluster");
    Job j = job;
    j.runTime = std::clamp<std::int64_t>(j.runTime, 0, j.limit);
    if (j.submit <= now_) {
        // Slurm tries to schedule a job when it is submitted, not only at the next event.
        j.submit = now_;
        pending_.push_back({ j, -1 });
        schedule();
        return;
    }
    auto pos = std::upper_bound(extraArrivals_.begin(), extraArrivals_.end(), j,
        [](const Job& a, const Job& b) { return a.submit < b.submit; });
    extraArrivals_.insert(pos, j);
}

void Simulator::advanceTo(std::int64_t t)
{
    for (std::int64_t e = nextEventTime(); e <= t; e = nextEventTime())
        processEventsAt(e);
    now_ = std::max(now_, t);
}

std::optional<std::int64_t> Simulator::runUntilStarted(std::int64_t id, std::int64_t horizon)
{
    for (;;) {
        if (auto s = startOf(id))
            return s;
        const std::int64_t e = nextEventTime();
        if (e > horizon)
            return std::nullopt;
        processEventsAt(e);
    }
}

void Simulator::runToEnd()
{
    for (std::int64_t e = nextEventTime(); e != never; e = nextEventTime())
        processEventsAt(e);
}

void Simulator::endRunningAt(std::int64_t id, std::int64_t t)
{
    for (auto& r : running_)
        if (r.id == id)
            r.end = std::max(std::min(r.end, t), now_);
}

std::optional<std::int64_t> Simulator::startOf(std::int64_t id) const
{
    const auto* s = insertedStart(id);
    return s ? std::optional(s->start) : std::nullopt;
}

std::optional<std::int64_t> Simulator::grantedLimitOf(std::int64_t id) const
{
    const auto* s = insertedStart(id);
    return s ? std::optional(s->limit) : std::nullopt;
}

const Simulator::InsertedStart* Simulator::insertedStart(std::int64_t id) const
{
    const auto it = std::find_if(
        insertedStarts_.begin(), insertedStarts_.end(), [id](const InsertedStart& s) { return s.id == id; });
    return it == insertedStarts_.end() ? nullptr : &*it;
}

void Simulator::processEventsAt(std::int64_t t)
{
    now_ = t;
    std::erase_if(running_, [&](const RunningJob& r) {
        if (r.end > t)
            return false;
        freeNodes_ += r.nodes;
        countUser(r.user, -1, -r.nodes);
        if (!endedAt_.empty() && r.traceIndex >= 0)
            endedAt_[static_cast<std::size_t>(r.traceIndex)] = r.end;
        return true;
    });
    for (; nextArrival_ < trace_->size() && (*trace_)[nextArrival_].submit <= t; ++nextArrival_)
        pending_.push_back({ (*trace_)[nextArrival_], static_cast<std::int64_t>(nextArrival_) });
    std::size_t due = 0;
    while (due < extraArrivals_.size() && extraArrivals_[due].submit <= t)
        pending_.push_back({ extraArrivals_[due++], -1 });
    extraArrivals_.erase(extraArrivals_.begin(), extraArrivals_.begin() + static_cast<std::ptrdiff_t>(due));
    schedule();
}

void Simulator::start(const PendingJob& p, std::int64_t limit)
{
    const Job& j = p.job;
    running_.push_back(
        { j.id, now_, now_ + std::min(j.runTime, limit), now_ + limit, j.nodes, j.user, p.traceIndex });
    freeNodes_ -= j.nodes;
    countUser(j.user, 1, j.nodes);
    if (p.traceIndex >= 0) {
        if (startLog_)
            (*startLog_)[static_cast<std::size_t>(p.traceIndex)] = now_;
    } else {
        insertedStarts_.push_back({ j.id, now_, limit });
    }
    const double wait = static_cast<double>(now_ - dependencyMetAt(p));
    auto& slot = recentWaits_[recentCount_ % waitWindow];
    if (recentCount_ >= waitWindow)
        recentSum_ -= slot;
    slot = wait;
    recentSum_ += wait;
    ++recentCount_;
}

void Simulator::countUser(std::int32_t user, int jobs, int units)
{
    if (user < 0 || (config_.userRunningJobs <= 0 && config_.userRunningUnits <= 0))
        return;
    const auto u = static_cast<std::size_t>(user);
    if (u >= userJobs_.size()) {
        userJobs_.resize(u + 1, 0);
        userUnits_.resize(u + 1, 0);
    }
    userJobs_[u] += jobs;
    userUnits_[u] += units;
}

std::int64_t Simulator::predecessorOf(const PendingJob& p) const
{
    return afterIndex_ && p.traceIndex >= 0 ? (*afterIndex_)[static_cast<std::size_t>(p.traceIndex)] : -1;
}

bool Simulator::waitsForDependency(const PendingJob& p) const
{
    const auto after = predecessorOf(p);
    return after >= 0 && endedAt_[static_cast<std::size_t>(after)] < 0;
}

std::int64_t Simulator::dependencyMetAt(const PendingJob& p) const
{
    const auto after = predecessorOf(p);
    if (after < 0)
        return p.job.submit;
    const auto ended = endedAt_[static_cast<std::size_t>(after)];
    return ended < 0 ? now_ : std::max(p.job.submit, ended);
}

std::int64_t Simulator::eligibleSince(const PendingJob& p) const
{
    return config_.heldJobsAge ? p.job.submit : dependencyMetAt(p);
}

bool Simulator::overUserLimit(const Job& job) const
{
    if (job.user < 0 || static_cast<std::size_t>(job.user) >= userJobs_.size())
        return false;
    const auto u = static_cast<std::size_t>(job.user);
    return (config_.userRunningJobs > 0 && userJobs_[u] >= config_.userRunningJobs)
        || (config_.userRunningUnits > 0 && userUnits_[u] > 0 // a job larger than the limit may run alone
            && userUnits_[u] + job.nodes > config_.userRunningUnits);
}

void Simulator::schedule()
{
    if (pending_.empty() || freeNodes_ == 0)
        return;
    order_.clear();
    const auto agedUntil = config_.priorityPeriod > 0 ? now_ - now_ % config_.priorityPeriod : now_;
    for (std::uint32_t i = 0; i < pending_.size(); ++i)
        order_.emplace_back(priority(pending_[i].job, eligibleSince(pending_[i]), agedUntil), i);
    // Highest priority first; ties go to the earlier submission, then the lower id.
    std::sort(order_.begin(), order_.end(), [&](const auto& a, const auto& b) {
        if (a.first != b.first)
            return a.first > b.first;
        const Job& ja = pending_[a.second].job;
        const Job& jb = pending_[b.second].job;
        return ja.submit != jb.submit ? ja.submit < jb.submit : ja.id < jb.id;
    });
    started_.assign(pending_.size(), 0);
    if (config_.backfill == Backfill::Conservative)
        startByPlan();
    else
        startBehindFirstBlocked();
    std::size_t k = 0;
    for (std::size_t i = 0; i < pending_.size(); ++i)
        if (!started_[i])
            pending_[k++] = std::move(pending_[i]);
    pending_.resize(k);
}

void Simulator::startBehindFirstBlocked()
{
    bool reserved = false;
    std::int64_t shadow = 0; // when the first blocked job is guaranteed its nodes (by limits)
    int extra = 0; // nodes free at the shadow time beyond what that job needs
    for (const auto& [prio, i] : order_) {
        if (freeNodes_ == 0)
            break;
        const Job& j = pending_[i].job;
        if (overUserLimit(j) || waitsForDependency(pending_[i]))
            continue;
        if (!reserved) {
            if (j.nodes <= freeNodes_) {
                start(pending_[i], j.limit);
                started_[i] = 1;
                continue;
            }
            if (config_.backfill == Backfill::None)
                break;
            std::vector<std::pair<std::int64_t, int>> ends;
            ends.reserve(running_.size());
            for (const auto& r : running_)
                ends.emplace_back(r.limitEnd, r.nodes);
            std::sort(ends.begin(), ends.end());
            int avail = freeNodes_;
            for (const auto& [t, n] : ends) {
                if (avail >= j.nodes)
                    break;
                avail += n;
                shadow = t;
            }
            extra = avail - j.nodes;
            reserved = true;
            continue;
        }
        if (j.nodes > freeNodes_)
            continue;
        std::int64_t limit = j.limit;
        bool endsBeforeShadow = now_ + limit <= shadow;
        if (!endsBeforeShadow && j.nodes > extra && j.minLimit > 0 && now_ + j.minLimit <= shadow) {
            // --time-min: Slurm lowers the limit as far as needed (not below minLimit) to backfill.
            limit = shadow - now_;
            endsBeforeShadow = true;
        }
        if (endsBeforeShadow || j.nodes <= extra) {
            if (!endsBeforeShadow)
                extra -= j.nodes;
            start(pending_[i], limit);
            started_[i] = 1;
        }
    }
}

namespace {

// Free nodes over time, by the running jobs' limits and the reservations made so far: a step function,
// each step's count holding from its time until the next step's (the last one for ever).
class NodePlan {
public:
    NodePlan(std::int64_t now, int freeNow, std::span<const RunningJob> running)
    {
        std::vector<std::pair<std::int64_t, int>> releases;
        releases.reserve(running.size());
        for (const auto& r : running)
            releases.emplace_back(std::max(r.limitEnd, now), r.nodes);
        std::sort(releases.begin(), releases.end());
        steps_.push_back({ now, freeNow });
        for (const auto& [t, n] : releases) {
            if (steps_.back().time == t)
                steps_.back().free += n;
            else
                steps_.push_back({ t, steps_.back().free + n });
        }
    }

    // The earliest step at which `nodes` are free for `length` seconds, and how long they stay free from
    // there (never: for ever).
    std::pair<std::int64_t, std::int64_t> earliestFit(int nodes, std::int64_t length) const
    {
        std::size_t first = 0;
        while (true) {
            std::size_t k = first;
            while (k < steps_.size() && steps_[k].free >= nodes)
                ++k;
            const std::int64_t from = steps_[first].time;
            const std::int64_t until = k < steps_.size() ? steps_[k].time : never;
            if (k > first && until - from >= length)
                return { from, until - from };
            first = k + 1; // a start before step k that lasts `length` would cover it
            if (first >= steps_.size())
                return { never, 0 }; // more nodes than the plan ever frees
        }
    }

    void reserve(std::int64_t from, std::int64_t length, int nodes)
    {
        const std::size_t a = splitAt(from);
        const std::size_t b = splitAt(from + length);
        for (std::size_t k = a; k < b; ++k)
            steps_[k].free -= nodes;
    }

    int freeAtStart() const { return steps_.front().free; }

private:
    struct Step {
        std::int64_t time;
        int free;
    };
    // The index of the step that begins at t, inserted if none does (t >= the first step's time).
    std::size_t splitAt(std::int64_t t)
    {
        auto it = std::lower_bound(
            steps_.begin(), steps_.end(), t, [](const Step& s, std::int64_t v) { return s.time < v; });
        if (it != steps_.end() && it->time == t)
            return static_cast<std::size_t>(it - steps_.begin());
        const auto at = it - steps_.begin();
        steps_.insert(it, { t, std::prev(it)->free });
        return static_cast<std::size_t>(at);
    }

    std::vector<Step> steps_;
};

} // namespace

void Simulator::startByPlan()
{
    NodePlan plan(now_, freeNodes_, running_);
    for (const auto& [prio, i] : order_) {
        if (plan.freeAtStart() == 0)
            break; // no later job could start now, and what it would reserve matters to none that could
        const Job& j = pending_[i].job;
        if (overUserLimit(j) || waitsForDependency(pending_[i]))
            continue;
        std::int64_t at = plan.earliestFit(j.nodes, j.limit).first;
        std::int64_t limit = j.limit;
        if (at != now_ && j.minLimit > 0 && j.nodes <= plan.freeAtStart()) {
            // --time-min: Slurm lowers the limit as far as needed (not below minLimit) to start it now.
            const auto [nowAt, nowRoom] = plan.earliestFit(j.nodes, j.minLimit);
            if (nowAt == now_) {
                at = now_;
                limit = std::min(j.limit, nowRoom);
            }
        }
        if (at == never)
            continue;
        plan.reserve(at, limit, j.nodes);
        if (at == now_) {
            start(pending_[i], limit);
            started_[i] = 1;
        }
    }
}

} // namespace baton::sim
