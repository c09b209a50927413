#include "sim_command.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace baton::sim::cli {

namespace {

LoadOptions loadOptionsFrom(const ctl::ParsedCommand& o)
{
    LoadOptions options;
    const auto unitText = o.text("unit");
    const auto unit = parseUnit(unitText);
    if (!unit)
        throw std::invalid_argument("--unit: expected auto, nodes, cores or gpus, got '" + unitText + "'");
    options.unit = *unit;
    options.coresPerNode = nonNegativeInteger(o, "cores-per-node");
    options.gpusPerNode = nonNegativeInteger(o, "gpus-per-node");
    return options;
}

// Cluster size in units: --nodes times the units per node; for SWF its header's size unless --nodes
// is given.
int capacityFrom(const ctl::ParsedCommand& o, const LoadedJobs& loaded)
{
    requireNodeSize(loaded);
    if (!o.has("nodes"))
        if (auto header = headerCapacity(loaded))
            return *header;
    const double nodes = o.number("nodes");
    if (!(nodes >= 1 && nodes * loaded.unitsPerNode() <= 1e9))
        throw std::invalid_argument("--nodes must be positive");
    return static_cast<int>(nodes) * loaded.unitsPerNode();
}

std::string droppedText(const Dropped& dropped, int capacity, ResourceUnit unit)
{
    std::string text;
    if (dropped.neverFit)
        text += std::to_string(dropped.neverFit) + " never fit the cluster (more than "
            + std::to_string(capacity) + " " + std::string(unitName(unit)) + ")";
    if (dropped.invalid)
        text += (text.empty() ? "" : ", ") + std::to_string(dropped.invalid) + " without a size or limit";
    return text;
}

} // namespace

std::int64_t parseDate(const std::string& s)
{
    std::tm tm {};
    std::istringstream in(s);
    in >> std::get_time(&tm, "%Y-%m-%d");
    if (in.fail() || in.peek() != std::char_traits<char>::eof())
        throw std::invalid_argument("expected a date YYYY-MM-DD, got '" + s + "'");
    return static_cast<std::int64_t>(timegm(&tm));
}

std::string formatDate(std::int64_t t)
{
    const auto tt = static_cast<std::time_t>(t);
    std::tm tm {};
    gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
    return buf;
}

// An option in hours as whole seconds, at least `minimumSeconds`.
std::int64_t hoursOption(const ctl::ParsedCommand& o, std::string_view name, std::int64_t minimumSeconds)
{
    const double hours = o.number(std::string(name));
    if (!(hours * 3600 >= static_cast<double>(minimumSeconds) && hours <= 24 * 365))
        throw std::invalid_argument("--" + std::string(name)
            + (minimumSeconds > 0 ? " must be at least a minute" : " must not be negative")
            + " and at most 8760 hours");
    return static_cast<std::int64_t>(std::llround(hours * 3600));
}

int nonNegativeInteger(const ctl::ParsedCommand& o, std::string_view name)
{
    const double v = o.number(name);
    if (!(v >= 0 && v <= 1e9) || v != static_cast<double>(static_cast<long long>(v)))
        throw std::invalid_argument("--" + std::string(name) + " must be a whole number >= 0");
    return static_cast<int>(v);
}

// Loads the trace and says on stderr what could not be used.
LoadedJobs loadReported(const ctl::ParsedCommand& o)
{
    const auto path = o.text("trace");
    if (path.empty())
        throw std::invalid_argument("--trace FILE is required");
    auto loaded = loadJobs(path, loadOptionsFrom(o));
    if (loaded.unusable)
        std::cerr << path << ": " << loaded.unusable << " rows without a run time or a size in "
                  << unitName(loaded.plan.unit) << " skipped\n";
    if (loaded.withoutGpus)
        std::cerr << path << ": " << loaded.withoutGpus << " jobs without GPUs are not in the GPU pool\n";
    if (loaded.repeatedIds)
        std::cerr
            << path << ": " << loaded.repeatedIds
            << " jobs repeat an earlier job's id (array tasks): replayed as separate jobs with fresh ids\n";
    if (loaded.limitsFromRunTime)
        std::cerr << path << ": " << loaded.limitsFromRunTime
                  << " rows without a requested limit: their run time is used as the limit\n";
    if (loaded.jobs.empty()) {
        const auto unit = loaded.plan.unit;
        if (unit == ResourceUnit::Cores && loaded.plan.coresPerNode <= 0)
            throw std::invalid_argument(path + ": the trace gives no core counts; give --cores-per-node");
        if (unit == ResourceUnit::Gpus && loaded.plan.gpusPerNode <= 0)
            throw std::invalid_argument(path + ": the trace gives no GPU counts; give --gpus-per-node");
        throw std::runtime_error(path + ": no usable job");
    }
    const double within = o.number("infer-dependencies-seconds");
    if (!(within >= 0 && within <= 86400))
        throw std::invalid_argument("--infer-dependencies-seconds must lie between 0 and 86400");
    if (within > 0)
        std::cerr << path << ": " << inferDependencies(loaded.jobs, static_cast<std::int64_t>(within))
                  << " dependencies inferred\n";
    return loaded;
}

std::string partitionLabel(const std::string& name)
{
    return name.empty() ? "(none)" : name;
}

// --partition, else the partition with most jobs (said on stderr when there is more than one).
std::string choosePartition(const ctl::ParsedCommand& o, const LoadedJobs& loaded)
{
    if (o.has("partition")) {
        const auto name = o.text("partition");
        if (std::find(loaded.partitions.begin(), loaded.partitions.end(), name) == loaded.partitions.end()) {
            std::string known;
            for (const auto& p : loaded.partitions)
                known += (known.empty() ? "" : ", ") + partitionLabel(p);
            throw std::invalid_argument(
                "--partition: '" + name + "' is not in the trace (partitions: " + known + ")");
        }
        return name;
    }
    const auto sizes = loaded.partitionSizes();
    const auto most = std::max_element(sizes.begin(), sizes.end()) - sizes.begin();
    if (loaded.partitions.size() > 1)
        std::cerr << "the trace has " << loaded.partitions.size() << " partitions; replaying "
                  << partitionLabel(loaded.partitions[most]) << " (" << sizes[most]
                  << " jobs; --partition chooses)\n";
    return loaded.partitions[most];
}

void requireNodeSize(const LoadedJobs& loaded)
{
    const auto unit = loaded.plan.unit;
    if ((unit == ResourceUnit::Cores && loaded.plan.coresPerNode <= 0)
        || (unit == ResourceUnit::Gpus && loaded.plan.gpusPerNode <= 0))
        throw std::invalid_argument("--unit " + std::string(unitName(unit)) + " needs the node size: give --"
            + (unit == ResourceUnit::Cores ? "cores" : "gpus") + "-per-node");
}

// The SWF header's machine size in units, if it gives one.
std::optional<int> headerCapacity(const LoadedJobs& loaded)
{
    if (loaded.plan.unit == ResourceUnit::Cores && loaded.headerProcs)
        return static_cast<int>(*loaded.headerProcs);
    if (loaded.headerNodes && loaded.plan.unit != ResourceUnit::Gpus)
        return static_cast<int>(*loaded.headerNodes) * loaded.unitsPerNode();
    return std::nullopt;
}

void applyQueueRules(const ctl::ParsedCommand& o, SchedulerConfig& c)
{
    c.userRunningJobs = nonNegativeInteger(o, "user-running-jobs");
    c.userRunningUnits = nonNegativeInteger(o, "user-running-units");
    const auto ageFrom = o.text("held-age-from");
    if (ageFrom != "submit" && ageFrom != "end")
        throw std::invalid_argument("--held-age-from must be submit or end, not '" + ageFrom + "'");
    c.heldJobsAge = ageFrom == "submit";
    c.priorityPeriod = nonNegativeInteger(o, "priority-period-seconds");
    const auto backfill = o.text("backfill");
    const auto kinds = { Backfill::Easy, Backfill::Conservative, Backfill::None };
    const auto kind
        = std::find_if(kinds.begin(), kinds.end(), [&](Backfill b) { return backfillName(b) == backfill; });
    if (kind == kinds.end())
        throw std::invalid_argument("--backfill must be easy, conservative or none, not '" + backfill + "'");
    c.backfill = *kind;
}

SchedulerConfig schedulerFrom(const ctl::ParsedCommand& o, const LoadedJobs& loaded)
{
    SchedulerConfig c;
    c.nodes = capacityFrom(o, loaded);
    c.ageWeight = o.number("age-weight");
    c.sizeWeight = o.number("size-weight");
    c.recordedWeight = o.number("priority-weight");
    c.maxAge = static_cast<std::int64_t>(o.number("max-age-days") * 86400);
    if (c.maxAge <= 0)
        throw std::invalid_argument("--max-age-days must be positive");
    applyQueueRules(o, c);
    return c;
}

// The partition's jobs, prepared for a cluster of `capacity` units; what was dropped is said on stderr.
std::shared_ptr<const std::vector<Job>> prepared(const std::string& path, const LoadedJobs& loaded,
    const std::string& partition, int capacity, Dropped& dropped)
{
    auto jobs = loaded.jobsOf(partition);
    prepareTrace(jobs, capacity, &dropped);
    if (jobs.empty())
        throw std::runtime_error(path + ": no job of partition " + partitionLabel(partition)
            + " fits a cluster of " + std::to_string(capacity) + " "
            + std::string(unitName(loaded.plan.unit)));
    std::cerr << "trace " << path << ", partition " << partitionLabel(partition) << ": " << jobs.size()
              << " jobs";
    if (dropped.total())
        std::cerr << " (dropped: " << droppedText(dropped, capacity, loaded.plan.unit) << ")";
    std::cerr << ", " << formatDate(jobs.front().submit) << " .. " << formatDate(jobs.back().submit) << '\n';
    return std::make_shared<const std::vector<Job>>(std::move(jobs));
}

ComparisonConfig comparisonFrom(
    const ctl::ParsedCommand& o, const std::vector<Job>& trace, const SchedulerConfig& scheduler)
{
    ComparisonConfig c = defaultComparisonConfig(
        trace, hoursOption(o, "warmup-hours", 0), hoursOption(o, "limit-hours", 60));
    c.scheduler = scheduler;
    if (const auto split = o.text("split"); !split.empty()) {
        c.split = parseDate(split);
        c.protocol.probePriority = medianRecordedPriority(trace, c.split);
    }
    c.protocol.interval = static_cast<std::int64_t>(o.number("interval-hours") * 3600);
    c.protocol.tick = static_cast<std::int64_t>(o.number("tick-seconds"));
    c.protocol.submitLead = static_cast<std::int64_t>(o.number("submit-lead-seconds"));
    if (c.protocol.tick < 1 || c.protocol.tick > c.protocol.limit)
        throw std::invalid_argument("--tick-seconds must lie between 1 and the limit");
    if (c.protocol.submitLead < 0)
        throw std::invalid_argument("--submit-lead-seconds must not be negative");
    const double sampleEveryHours = o.number("sample-every-hours");
    c.sampleEvery = static_cast<std::int64_t>(std::llround(sampleEveryHours * 3600));
    if (!(sampleEveryHours > 0) || c.sampleEvery < 1 || c.sampleEvery % c.protocol.tick != 0)
        throw std::invalid_argument("--sample-every-hours must be a positive multiple of --tick-seconds");
    c.protocol.shapes = o.positiveIntegers("shapes");
    c.tolerance = o.number("tolerance-seconds");
    c.handoverSeconds = o.number("handover-seconds");
    const std::string objective = o.text("predict-objective");
    if (objective != "within" && objective != "mean")
        throw std::invalid_argument("--predict-objective must be within or mean, not '" + objective + "'");
    c.predictMeanInterruption = objective == "mean";
    c.predictOverlapBudgetSeconds = o.number("predict-overlap-seconds");
    const std::string rule = o.text("predict-rule");
    if (rule != "per-size" && rule != "quantile")
        throw std::invalid_argument("--predict-rule must be per-size or quantile, not '" + rule + "'");
    c.predictPerShape = rule == "per-size";
    if (!(c.predictOverlapBudgetSeconds >= 0))
        throw std::invalid_argument("--predict-overlap-seconds must not be negative");
    c.overlapBudgetFromAvg = o.text("overlap-budget-seconds") == "avg";
    if (!c.overlapBudgetFromAvg)
        c.overlapBudgetSeconds = o.number("overlap-budget-seconds");
    const double timeMinHours = o.number("successor-time-min-hours");
    if (!(timeMinHours >= 0 && timeMinHours * 3600 <= static_cast<double>(c.protocol.limit)))
        throw std::invalid_argument("--successor-time-min-hours must lie between 0 and the limit ("
            + std::to_string(c.protocol.limit / 3600) + " h)");
    c.protocol.successorMinLimit = static_cast<std::int64_t>(timeMinHours * 3600);
    c.training.seed = static_cast<unsigned>(o.number("seed"));
    const std::string offset = o.text("wait-offset");
    if (offset != "none" && offset != "recent")
        throw std::invalid_argument("--wait-offset must be none or recent, not '" + offset + "'");
    c.training.offset = offset == "recent" ? WaitOffset::RecentWait : WaitOffset::None;
    const double chainDays = o.number("chain-days");
    if (!(chainDays >= 0 && chainDays <= 365))
        throw std::invalid_argument("--chain-days must lie between 0 and 365");
    c.chains = chainDays > 0;
    if (c.chains) {
        c.chain.compute = static_cast<std::int64_t>(chainDays * 86400);
        c.chain.handover = static_cast<std::int64_t>(c.handoverSeconds);
        const double inFlight = o.number("successors-in-flight");
        if (inFlight != 1 && inFlight != 2)
            throw std::invalid_argument("--successors-in-flight must be 1 or 2");
        c.chain.successorsInFlight = static_cast<int>(inFlight);
        c.chainEnd = trace.back().submit - c.chain.compute - c.protocol.limit;
        if (c.handoverSeconds >= static_cast<double>(c.protocol.limit))
            throw std::invalid_argument("--handover-seconds must be shorter than the limit");
    }
    if (c.protocol.interval <= 0 || c.tolerance < 0 || c.handoverSeconds < 0 || c.overlapBudgetSeconds < 0)
        throw std::invalid_argument("--interval-hours must be positive, tolerances not negative");
    for (int n : c.protocol.shapes)
        if (n > scheduler.nodes)
            throw std::invalid_argument("a probe of " + std::to_string(n)
                + " units does not fit the cluster of " + std::to_string(scheduler.nodes));
    return c;
}

} // namespace baton::sim::cli
