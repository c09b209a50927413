#include "live_queue.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <stdexcept>

namespace baton::slurm {

namespace {

// Pending jobs that cannot start now whatever the free nodes: they are not ahead of anyone.
bool competes(const QueueJob& j)
{
    if (j.priority <= 0) // held
        return false;
    const std::string& r = j.stateReason;
    return !(r.starts_with("JobHeld") || r.starts_with("Dependency") || r == "BeginTime");
}

std::int64_t parseNumber(std::string_view s)
{
    std::int64_t v = -1;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 0)
        return -1;
    return v;
}

} // namespace

std::size_t countArrayTasks(const std::string& tasks, std::size_t cap)
{
    std::string_view rest(tasks);
    if (const auto pct = rest.find('%'); pct != std::string_view::npos)
        rest = rest.substr(0, pct); // "%4" limits how many run at once, not how many there are
    std::size_t count = 0;
    while (!rest.empty() && count < cap) {
        const auto comma = rest.find(',');
        std::string_view part = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        std::int64_t step = 1;
        if (const auto colon = part.find(':'); colon != std::string_view::npos) {
            step = parseNumber(part.substr(colon + 1));
            part = part.substr(0, colon);
        }
        const auto dash = part.find('-');
        const std::int64_t first = parseNumber(part.substr(0, dash));
        const std::int64_t last = dash == std::string_view::npos ? first : parseNumber(part.substr(dash + 1));
        if (first < 0 || last < first || step <= 0) {
            ++count; // unreadable: count the record itself rather than nothing
            continue;
        }
        count += static_cast<std::size_t>((last - first) / step + 1);
    }
    return std::max<std::size_t>(std::min(count, cap), 1);
}

double LiveQueue::normalisedPriority(std::int64_t slurmPriority)
{
    constexpr double top = std::numeric_limits<std::uint32_t>::max();
    return std::clamp(static_cast<double>(slurmPriority) / top, 0.0, 1.0);
}

RecentStarts::RecentStarts(std::size_t window)
    : window_(std::max<std::size_t>(window, 1))
{
}

void RecentStarts::add(const QueueSnapshot& snapshot)
{
    for (const QueueJob& j : snapshot.jobs) {
        if (!j.started() || j.startTime > snapshot.takenAt || j.submitTime <= 0)
            continue;
        // From eligibility where Slurm reports it (a job held by a dependency), as the simulator counts.
        const std::int64_t waitingSince = std::max(j.submitTime, j.eligibleTime);
        waits_.try_emplace({ j.startTime, j.jobId }, std::max<std::int64_t>(j.startTime - waitingSince, 0));
        if (waits_.size() > window_)
            waits_.erase(waits_.begin()); // the oldest start
    }
}

double RecentStarts::meanWait() const
{
    if (waits_.empty())
        return 0;
    double sum = 0;
    for (const auto& [key, wait] : waits_)
        sum += static_cast<double>(wait);
    return sum / static_cast<double>(waits_.size());
}

LiveQueue::LiveQueue(const QueueSnapshot& snapshot, const LiveQueueOptions& options, PriorityFunction priority,
    RecentStarts* history)
    : now_(snapshot.takenAt)
    , priority_(std::move(priority))
{
    if (options.totalNodes <= 0)
        throw std::invalid_argument("LiveQueue: the cluster's node count must be positive");
    auto limitOf = [&](const QueueJob& j) {
        return j.timeLimitMinutes && *j.timeLimitMinutes > 0 ? *j.timeLimitMinutes * 60
                                                             : options.unlimitedSeconds;
    };

    int busy = 0;
    for (const QueueJob& j : snapshot.jobs) {
        if (j.pending()) {
            if (!competes(j))
                continue;
            sim::Job job;
            job.id = j.jobId;
            job.submit = j.submitTime > 0 ? std::min(j.submitTime, now_) : now_;
            job.limit = limitOf(j);
            job.nodes = std::max(j.nodeCount, 1);
            job.recordedPriority = normalisedPriority(j.priority);
            const std::size_t copies
                = j.arrayTaskString.empty() ? 1 : countArrayTasks(j.arrayTaskString, options.maxArrayTasks);
            for (std::size_t c = 0; c < copies; ++c)
                pending_.push_back({ job, -1 });
            continue;
        }
        if (j.active()) {
            const int nodes = std::max(j.nodeCount, 1);
            const std::int64_t start = j.startTime > 0 ? std::min(j.startTime, now_) : now_;
            // A job past its limit (completing, or allowed OverTimeLimit) is planned as ending now.
            const std::int64_t limitEnd = std::max(start + limitOf(j), now_);
            running_.push_back({ j.jobId, start, limitEnd, limitEnd, nodes });
            busy += nodes;
        }
    }
    freeNodes_ = std::max(options.totalNodes - busy, 0);

    RecentStarts snapshotOnly(options.recentWindow);
    RecentStarts& starts = history ? *history : snapshotOnly;
    starts.add(snapshot);
    recentMeanWait_ = starts.meanWait();
}

double LiveQueue::priorityOf(const sim::Job& job, std::int64_t at) const
{
    return priority_ ? priority_(job, at) : job.recordedPriority;
}

} // namespace baton::slurm
