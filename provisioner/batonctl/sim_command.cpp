#include "sim_command.hpp"

#include "command_line.hpp"
#include "comparison.hpp"
#include "model_store.hpp"
#include "svg_plot.hpp"
#include "trace_input.hpp"
#include "validation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace baton::sim {

namespace {

// Declarations of the three commands' options; their --help is generated from these.
void addUnitOptions(ctl::CommandSpec& spec)
{
    spec.option("unit", "auto|nodes|cores|gpus",
            "what the simulated cluster allocates; auto: nodes, or cores for SWF\n"
            "(its only size is a processor count)",
            "auto")
        .option("cores-per-node", "N", "node size in cores (SWF: MaxProcs / MaxNodes of its header)", "0")
        .option("gpus-per-node", "N", "node size in GPUs, for --unit gpus with a trace of node counts", "0")
        .option("partition", "NAME",
            "replay this partition only (each partition is its own pool of nodes)\n"
            "and place the probes in it (default: the partition with most jobs)")
        .option("user-running-jobs", "N", "at most N running jobs per user (QOS MaxJobsPerUser)", "0")
        .option("user-running-units", "N", "at most N units held per user (QOS MaxTRESPerUser)", "0")
        .option("infer-dependencies-seconds", "S",
            "a job that started within S s of the end of another job of its user,\n"
            "submitted before that end, waits for it (0: off)",
            "0");
}

void addSchedulerOptions(ctl::CommandSpec& spec)
{
    spec.option("trace", "FILE", "the job trace file; required")
        .option("nodes", "N", "cluster size in nodes (an SWF trace: its header's MaxNodes)", "74")
        .option("age-weight", "W", "priority weight of age", "100")
        .option("size-weight", "W", "priority weight of job size", "10")
        .option("priority-weight", "W", "priority weight of the trace's recorded priority", "1000")
        .option("max-age-days", "D", "age at which the age factor saturates", "7");
    addUnitOptions(spec);
}

void addComparisonOptions(ctl::CommandSpec& spec)
{
    spec.option("split", "YYYY-MM-DD", "train before, evaluate after (default: the middle of the trace)")
        .option("warmup-hours", "H", "no probe in the first H hours after the first recorded start", "168")
        .option("limit-hours", "H",
            "limit of the probe jobs and of the chain's jobs; a trace of a few days\n"
            "needs jobs shorter than Mirage's 48 h",
            "48")
        .option("interval-hours", "H", "spacing of probes", "4")
        .option("shapes", "N,N", "node counts of probe chains", "1,8")
        .option("tolerance-seconds", "S", "\"within\" tolerance", "600")
        .option("handover-seconds", "S", "price of one handover checkpoint, snapshot + persist", "60")
        .option("successor-time-min-hours", "H",
            "submit successors with Slurm's --time-min H: backfill may start one with\n"
            "a limit cut to as little as H (0: the full limit, Mirage's protocol)",
            "0")
        .option("predict-objective", "within|mean",
            "predict's q on the held-out training probes: the most successors within\n"
            "the tolerance (mean overlap <= --predict-overlap-seconds), or Mirage's\n"
            "least mean |interruption|",
            "within")
        .option("predict-overlap-seconds", "S", "predict (within): bound on the mean early start", "1800")
        .option("predict-rule", "per-size|quantile",
            "predict (within): per probe size, the best on the held-out probes of the\n"
            "quantile rule and the window rule (submit when the chance of a start within\n"
            "the tolerance of the predecessor's end reaches tau); or one quantile rule",
            "per-size")
        .option("overlap-budget-seconds", "S|avg",
            "checkpoint-aware: bound on the mean early start on the held-out training\n"
            "probes; avg: the overlap Mirage's avg spends on them",
            "avg")
        .option("chain-days", "D",
            "chain efficiency: a training of D days of compute as limit-length jobs from\n"
            "every probe moment, one chain per policy (0: skip)",
            "7")
        .option("model", "FILE", "use this trained predictor instead of training one")
        .option("save-model", "FILE",
            "write the trained predictor here (compare: default DIR/wait-predictor.json)")
        .option(
            "db-model", "NAME", "use the latest version of this predictor from the database's models table")
        .option(
            "db-save", "NAME", "store the trained predictor, with its metrics, as the next version of NAME")
        .option("database", "CONNINFO", "for --db-*: else $BATON_DATABASE, else the PG* environment")
        .option("seed", "N", "training seed", "0");
}

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

void applyUserLimits(const ctl::ParsedCommand& o, SchedulerConfig& c)
{
    c.userRunningJobs = nonNegativeInteger(o, "user-running-jobs");
    c.userRunningUnits = nonNegativeInteger(o, "user-running-units");
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
    applyUserLimits(o, c);
    return c;
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

// Sizes `sim fit` tries for a partition, in units: --nodes N,N,... times the node size; by default
// the recorded peak usage and 2.5 to 15 % below it, in steps of 2.5 % (down, drained or reserved nodes make
// the usable pool smaller than the peak), else the SWF header's size.
std::vector<int> fitSizes(const ctl::ParsedCommand& o, const LoadedJobs& loaded, const std::vector<Job>& jobs)
{
    std::vector<int> sizes;
    if (o.text("nodes") != "auto") {
        requireNodeSize(loaded);
        for (int n : o.positiveIntegers("nodes"))
            sizes.push_back(n * loaded.unitsPerNode());
        return sizes;
    }
    if (const auto peak = recordedPeakUsage(jobs); peak > 0) {
        for (double f : { 0.85, 0.875, 0.9, 0.925, 0.95, 0.975, 1.0 })
            sizes.push_back(std::max(1, static_cast<int>(std::lround(f * static_cast<double>(peak)))));
    } else if (auto header = headerCapacity(loaded)) {
        sizes.push_back(*header);
    } else {
        throw std::invalid_argument("no recorded starts to size the cluster from: give --nodes");
    }
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    return sizes;
}

int fitCommand(const ctl::ParsedCommand& o)
{
    const auto path = o.text("trace");
    const auto loaded = loadReported(o);
    const double warnBelow = o.number("warn-below");
    std::vector<std::string> partitions = loaded.partitions;
    if (o.has("partition"))
        partitions = { choosePartition(o, loaded) };
    const auto unit = std::string(unitName(loaded.plan.unit));
    struct Weights {
        double age, size, recorded;
    };
    std::vector<Weights> grid { { 1000, 0, 0 }, { 1000, 100, 0 }, { 1000, 1000, 0 }, { 0, 0, 1000 },
        { 1000, 100, 1000 }, { 100, 10, 1000 } };
    if (const auto given = o.text("weights"); !given.empty()) {
        // AGE/SIZE/PRIORITY,...: weights to try instead of the grid above.
        grid.clear();
        std::istringstream list(given);
        for (std::string triple; std::getline(list, triple, ',');) {
            Weights w {};
            char slash1 = 0, slash2 = 0;
            std::istringstream in(triple);
            if (!(in >> w.age >> slash1 >> w.size >> slash2 >> w.recorded) || slash1 != '/' || slash2 != '/'
                || !(in >> std::ws).eof() || !(w.age >= 0 && w.size >= 0 && w.recorded >= 0))
                throw std::invalid_argument(
                    "--weights: expected AGE/SIZE/PRIORITY,... with numbers >= 0, got '" + triple + "'");
            grid.push_back(w);
        }
        if (grid.empty())
            throw std::invalid_argument("--weights: no weights given");
    }
    // --residuals: every compared job's recorded and simulated wait under each partition's best fit,
    // to see which jobs the replay gets wrong (by wait, size, user, time).
    const auto residualsPath = o.text("residuals");
    std::ofstream residuals;
    if (!residualsPath.empty()) {
        residuals.open(residualsPath);
        if (!residuals)
            throw std::runtime_error("cannot write " + residualsPath);
        residuals << "partition,id,user,units,submit,limit_s,run_time_s,recorded_wait_s,simulated_wait_s\n";
    }
    int poor = 0;
    for (const auto& partition : partitions) {
        const auto jobs = loaded.jobsOf(partition);
        const auto sizes = fitSizes(o, loaded, jobs);
        std::printf("partition %s: %zu jobs, recorded peak use %lld %s\n", partitionLabel(partition).c_str(),
            jobs.size(), static_cast<long long>(recordedPeakUsage(jobs)), unit.c_str());
        std::printf("%7s %8s %6s %6s %6s %7s %10s %10s %7s %8s %9s %9s %7s\n", unit.c_str(), "neverfit",
            "age", "size", "prio", "jobs", "medAE(s)", "p90AE(s)", "corr", "logcorr", "recMean", "simMean",
            "sec");
        struct Row {
            FitReport fit;
            std::string line;
            std::shared_ptr<const std::vector<Job>> trace;
            SchedulerConfig config;
            std::int64_t from;
        };
        std::vector<Row> rows;
        for (int n : sizes) {
            auto prepared = jobs;
            Dropped dropped;
            prepareTrace(prepared, n, &dropped);
            if (prepared.empty())
                continue;
            auto trace = std::make_shared<const std::vector<Job>>(std::move(prepared));
            const auto from = defaultComparisonConfig(*trace, hoursOption(o, "warmup-hours", 0)).warmupEnd;
            for (const auto& w : grid) {
                SchedulerConfig c;
                c.maxAge = static_cast<std::int64_t>(o.number("max-age-days") * 86400);
                c.nodes = n;
                c.ageWeight = w.age;
                c.sizeWeight = w.size;
                c.recordedWeight = w.recorded;
                applyUserLimits(o, c);
                const auto r = validateReplay(trace, c, from);
                char line[256];
                std::snprintf(line, sizeof line,
                    "%7d %8zu %6.0f %6.0f %6.0f %7zu %10.0f %10.0f %7.3f %8.3f %9.0f %9.0f %7.2f", n,
                    dropped.neverFit, w.age, w.size, w.recorded, r.jobs, r.medianAbsError, r.p90AbsError,
                    r.correlation, r.logCorrelation, r.recordedMeanWait, r.simulatedMeanWait,
                    r.replaySeconds);
                std::puts(line);
                rows.push_back({ r, line, trace, c, from });
            }
        }
        if (rows.empty()) {
            std::printf("partition %s: no job fits any size tried\n", partitionLabel(partition).c_str());
            ++poor;
            continue;
        }
        // Best fit: the smallest sum of ranks over the four figures (both errors low, both correlations
        // high), so that no single figure decides.
        std::vector<double> score(rows.size(), 0);
        auto rankBy = [&](auto key) {
            std::vector<std::size_t> idx(rows.size());
            std::iota(idx.begin(), idx.end(), 0);
            std::stable_sort(idx.begin(), idx.end(),
                [&](std::size_t a, std::size_t b) { return key(rows[a]) < key(rows[b]); });
            for (std::size_t r = 0; r < idx.size(); ++r)
                score[idx[r]] += static_cast<double>(r);
        };
        rankBy([](const Row& r) { return r.fit.medianAbsError; });
        rankBy([](const Row& r) { return r.fit.p90AbsError; });
        rankBy([](const Row& r) { return -r.fit.correlation; });
        rankBy([](const Row& r) { return -r.fit.logCorrelation; });
        const auto& best = rows[std::min_element(score.begin(), score.end()) - score.begin()];
        std::printf("best fit for partition %s (smallest rank sum of medAE, p90AE, -corr, -logcorr):\n%s\n",
            partitionLabel(partition).c_str(), best.line.c_str());
        if (residuals.is_open()) {
            std::vector<JobWait> waits;
            validateReplay(best.trace, best.config, best.from, &waits);
            for (const auto& w : waits)
                residuals << partitionLabel(partition) << ',' << w.job->id << ',' << w.job->user << ','
                          << w.job->nodes << ',' << w.job->submit << ',' << w.job->limit << ','
                          << w.job->runTime << ',' << w.recorded << ',' << w.simulated << '\n';
            if (!residuals)
                throw std::runtime_error("cannot write " + residualsPath);
        }
        // A queue unlike the real one makes every policy figure measured on it meaningless.
        if (best.fit.jobs == 0) {
            std::printf("WARNING: partition %s: no job submitted after the warm-up has a recorded "
                        "start, so the fit cannot be judged (a model-generated trace?)\n",
                partitionLabel(partition).c_str());
            ++poor;
        } else if (!(best.fit.logCorrelation >= warnBelow)) {
            std::printf("WARNING: partition %s fits poorly: correlation of log waits %.3f < %.2f; the "
                        "simulated queue is unlike the recorded one, so do not trust policies evaluated on "
                        "it\n",
                partitionLabel(partition).c_str(), best.fit.logCorrelation, warnBelow);
            ++poor;
        }
    }
    if (poor)
        std::fprintf(stderr, "sim fit: %d of %zu partitions fit poorly or could not be judged\n", poor,
            partitions.size());
    return 0;
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
    const double chainDays = o.number("chain-days");
    if (!(chainDays >= 0 && chainDays <= 365))
        throw std::invalid_argument("--chain-days must lie between 0 and 365");
    c.chains = chainDays > 0;
    if (c.chains) {
        c.chain.compute = static_cast<std::int64_t>(chainDays * 86400);
        c.chain.handover = static_cast<std::int64_t>(c.handoverSeconds);
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

// The hindsight bound's fraction within the tolerance, when the comparison has it.
std::optional<double> boundWithin(const Comparison& r)
{
    for (const auto& row : r.rows)
        if (row.name == "oracle" && row.metrics.count > 0)
            return row.metrics.fractionWithin;
    return std::nullopt;
}

// A policy's fraction within the tolerance over the hindsight bound's, measured on the same probes:
// the restated target is >= 0.9.
std::optional<double> ratioToBound(const Comparison& r, const PolicyRow& row)
{
    const auto bound = boundWithin(r);
    if (!bound || *bound <= 0)
        return std::nullopt;
    return row.metrics.fractionWithin / *bound;
}

void printChainTable(const Comparison& r, const ComparisonConfig& config, std::ostream& out)
{
    out << "chains: " << config.chain.compute / 86400.0 << " days of compute as "
        << config.protocol.limit / 3600.0 << " h jobs from each probe moment before "
        << formatDate(std::min(config.evaluationEnd, config.chainEnd)) << " (" << r.chainStarts
        << " per policy); handover " << config.chain.handover << " s\n";
    char line[256];
    std::snprintf(line, sizeof line, "%-17s %7s %11s %9s %6s %12s %10s", "policy", "chains", "efficiency%",
        "worst%", "jobs", "idle(node-h)", "unfinished");
    out << line << '\n';
    for (const auto& row : r.rows) {
        if (!row.chain)
            continue;
        const auto& c = *row.chain;
        std::snprintf(line, sizeof line, "%-17s %7zu %11.2f %9.2f %6.2f %12.2f %10zu", row.name.c_str(),
            c.chains, 100 * c.efficiency, 100 * c.minEfficiency, c.meanJobs, c.meanIdleNodeHours,
            c.unfinished);
        out << line << '\n';
    }
}

// With a successor --time-min, two more columns: the share of successors started with a shortened
// limit, and the mean limit granted.
void printTable(const Comparison& r, bool withGrants, std::ostream& out)
{
    char line[256];
    std::snprintf(line, sizeof line, "%-17s %5s %4s %6s %9s %9s %9s %6s %7s %9s %9s %8s %9s", "policy", "q",
        "pers", "probes", "mean(m)", "median(m)", "p90(m)", "zero%", "+-tol%", "overlap", "gap(m)", "eff+-%",
        "effOvl(m)");
    out << line << " /bound" << (withGrants ? "   short%  limit(h)\n" : "\n");
    for (const auto& row : r.rows) {
        const auto& m = row.metrics;
        std::snprintf(line, sizeof line,
            "%-17s %5s %4s %6zu %9.1f %9.1f %9.1f %6.1f %7.1f %9.1f %9.1f %8.1f %9.2f", row.name.c_str(),
            !row.rules.empty()      ? "size"
                : std::isnan(row.q) ? "-"
                                    : std::to_string(row.q).substr(0, 4).c_str(),
            row.persist ? std::to_string(row.persist).c_str() : "-", m.count, m.mean / 60, m.median / 60,
            m.p90 / 60, 100 * m.fractionZero, 100 * m.fractionWithin, m.meanOverlap / 60, m.meanGap / 60,
            100 * m.effectiveWithin, m.effectiveMeanOverlap / 60);
        out << line;
        const auto ratio = ratioToBound(r, row);
        std::snprintf(line, sizeof line, " %6s", ratio ? std::to_string(*ratio).substr(0, 5).c_str() : "-");
        out << line;
        if (withGrants) {
            std::snprintf(
                line, sizeof line, " %8.1f %9.1f", 100 * row.fractionShortened, row.meanGrantedLimit / 3600);
            out << line;
        }
        out << '\n';
    }
}

void writeOutputs(const Comparison& r, const std::filesystem::path& dir, const ComparisonConfig& config)
{
    std::filesystem::create_directories(dir);
    {
        std::ofstream csv(dir / "compare.csv");
        csv << "policy,q,rules,persist_ticks,probes,unstarted,mean_s,median_s,p90_s,fraction_zero,fraction_"
               "within,"
               "mean_overlap_s,mean_gap_s,effective_fraction_within,effective_mean_overlap_s,tolerance_s,"
               "handover_s,fraction_shortened,mean_granted_limit_s,within_over_bound,chains,chains_"
               "unfinished,"
               "chain_efficiency,chain_worst_efficiency,chain_mean_jobs,chain_idle_node_hours\n";
        for (const auto& row : r.rows) {
            const auto& m = row.metrics;
            csv << row.name << ',' << (std::isnan(row.q) ? std::string() : std::to_string(row.q)) << ','
                << describeRules(row.rules) << ','
                << (row.persist ? std::to_string(row.persist) : std::string()) << ',' << m.count << ','
                << m.unstarted << ',' << m.mean << ',' << m.median << ',' << m.p90 << ',' << m.fractionZero
                << ',' << m.fractionWithin << ',' << m.meanOverlap << ',' << m.meanGap << ','
                << m.effectiveWithin << ',' << m.effectiveMeanOverlap << ',' << config.tolerance << ','
                << config.handoverSeconds << ',' << row.fractionShortened << ',' << row.meanGrantedLimit
                << ',';
            if (const auto ratio = ratioToBound(r, row))
                csv << *ratio;
            csv << ',';
            if (row.chain)
                csv << row.chain->chains << ',' << row.chain->unfinished << ',' << row.chain->efficiency
                    << ',' << row.chain->minEfficiency << ',' << row.chain->meanJobs << ','
                    << row.chain->meanIdleNodeHours;
            else
                csv << ",,,,,";
            csv << '\n';
        }
        if (!csv)
            throw std::runtime_error("cannot write " + (dir / "compare.csv").string());
    }
    {
        std::ofstream csv(dir / "interruptions.csv");
        csv << "policy,probe,interruption_s\n";
        for (const auto& row : r.rows)
            for (std::size_t i = 0; i < row.interruptions.size(); ++i)
                csv << row.name << ',' << i << ','
                    << (row.interruptions[i] ? std::to_string(*row.interruptions[i]) : std::string()) << '\n';
        if (!csv)
            throw std::runtime_error("cannot write " + (dir / "interruptions.csv").string());
    }
    if (!r.candidates.empty()) {
        std::ofstream csv(dir / "candidates.csv");
        csv << "rule,value,persist_ticks,nodes,symmetric_cost_s,handover_cost_s,fraction_within,mean_overlap_"
               "s,"
               "mean_gap_s,effective_fraction_within\n";
        for (const auto& c : r.candidates)
            csv << c.rule.kindName() << ',' << c.rule.value << ',' << c.rule.persist << ','
                << (c.nodes == 0 ? std::string("all") : std::to_string(c.nodes)) << ',' << c.symmetricCost
                << ',' << c.handoverCost << ',' << c.metrics.fractionWithin << ',' << c.metrics.meanOverlap
                << ',' << c.metrics.meanGap << ',' << c.metrics.effectiveWithin << '\n';
        if (!csv)
            throw std::runtime_error("cannot write " + (dir / "candidates.csv").string());
    }
    std::vector<CdfSeries> series;
    for (const auto& row : r.rows) {
        CdfSeries s { row.name, {} };
        for (const auto& x : row.interruptions)
            if (x)
                s.values.push_back(static_cast<double>(*x) / 3600.0);
        series.push_back(std::move(s));
    }
    std::ofstream svg(dir / "interruptions.svg");
    svg << cdfSvg(
        series, "Interruption = successor start - predecessor end", "interruption (hours)", -12, 24);
    if (!svg)
        throw std::runtime_error("cannot write " + (dir / "interruptions.svg").string());
}

int compareCommand(const ctl::ParsedCommand& o, std::vector<std::string> policies, bool writeFiles)
{
    const auto t0 = std::chrono::steady_clock::now();
    const auto loaded = loadReported(o);
    const auto partition = choosePartition(o, loaded);
    const auto scheduler = schedulerFrom(o, loaded);
    Dropped dropped;
    const auto trace = prepared(o.text("trace"), loaded, partition, scheduler.nodes, dropped);
    auto config = comparisonFrom(o, *trace, scheduler);
    config.policies = std::move(policies);
    const auto modelIn = o.text("model");
    auto modelOut = o.text("save-model");
    const auto dbModel = o.text("db-model");
    const auto dbSave = o.text("db-save");
    std::string conninfo = o.text("database");
    if (conninfo.empty())
        if (const char* env = std::getenv("BATON_DATABASE"))
            conninfo = env;
    if (!modelIn.empty() && !dbModel.empty())
        throw std::invalid_argument("give --model or --db-model, not both");
    const auto outDir = writeFiles ? o.text("out") : std::string();
    if (writeFiles && modelOut.empty() && modelIn.empty() && dbModel.empty())
        modelOut = (std::filesystem::path(outDir) / "wait-predictor.json").string();

    std::shared_ptr<const WaitPredictor> pretrained;
    std::optional<db::Connection> database;
    if (!dbModel.empty() || !dbSave.empty())
        database.emplace(conninfo);
    if (!modelIn.empty())
        pretrained = std::make_shared<const WaitPredictor>(WaitPredictor::load(modelIn));
    else if (!dbModel.empty())
        pretrained = std::make_shared<const WaitPredictor>(loadStoredModel(*database, dbModel));
    std::shared_ptr<const WaitPredictor> used;
    const auto r = runComparison(trace, config, pretrained, &used);

    std::cout << "cluster " << scheduler.nodes << " " << unitName(loaded.plan.unit);
    if (loaded.partitions.size() > 1)
        std::cout << ", partition " << partitionLabel(partition);
    if (dropped.neverFit)
        std::cout << " (left out, larger than the cluster: " << dropped.neverFit << " jobs)";
    std::cout << "; warm-up until " << formatDate(config.warmupEnd) << "; train before "
              << formatDate(config.split) << "; evaluate " << formatDate(config.split) << " .. "
              << formatDate(config.evaluationEnd) << "; " << r.evaluationProbes << " probes every "
              << config.protocol.interval / 3600.0 << " h; tolerance " << config.tolerance << " s; handover "
              << config.handoverSeconds << " s";
    if (config.protocol.successorMinLimit > 0)
        std::cout << "; successors with --time-min " << config.protocol.successorMinLimit / 3600.0 << " h";
    std::cout << '\n';
    if (r.predictor) {
        const auto& m = *r.predictor;
        std::cout << "predictor: " << m.trainRows << " training rows, " << m.heldOutRows
                  << " held out; held-out MAE(log) " << m.heldOutMaeLog << ", median abs error "
                  << m.heldOutMedianAbsErrorSeconds / 60 << " min, q0.9 coverage " << m.heldOutCoverage90
                  << '\n';
    }
    if (r.gradient) {
        const auto& g = *r.gradient;
        std::printf(
            "policy-gradient: %zu training episodes recorded in %.1f s, trained in %.1f s (%zu epochs); "
            "mean reward (-|interruption|, h) greedy %.3f -> %.3f\n",
            g.episodes, r.gradientEpisodeSeconds, g.seconds, g.expectedReward.size(), g.greedyRewardBefore,
            g.greedyRewardAfter);
    }
    if (!r.candidates.empty()) {
        if (config.predictMeanInterruption)
            std::printf("predict: q with the least mean |interruption| on the held-out training probes\n");
        else
            std::printf(
                "predict: %s with the most within %.0f s on the held-out training probes, mean overlap <= "
                "%.0f s\n",
                config.predictPerShape ? "per probe size, the quantile or window rule" : "q",
                config.tolerance, config.predictOverlapBudgetSeconds);
        for (const auto& row : r.rows)
            if (!row.rules.empty())
                std::printf("%s's rules: %s\n", row.name.c_str(), describeRules(row.rules).c_str());
        std::printf("checkpoint-aware: overlap budget %.3f s%s\n", r.overlapBudget,
            config.overlapBudgetFromAvg ? " (avg's mean overlap on the held-out training probes)" : "");
    }
    printTable(r, config.protocol.successorMinLimit > 0, std::cout);
    if (config.chains)
        printChainTable(r, config, std::cout);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "time: samples %.1f s, training %.1f s, quantile choice %.1f s, evaluation %.1f s, chains %.1f s, "
        "total %.1f s\n",
        r.sampleSeconds, r.trainSeconds, r.calibrateSeconds, r.evaluateSeconds, r.chainSeconds, total);
    if (writeFiles) {
        writeOutputs(r, outDir, config);
        std::cout << "wrote " << outDir << "/compare.csv, interruptions.csv, interruptions.svg"
                  << (r.candidates.empty() ? "" : ", candidates.csv (held-out training probes)") << '\n';
    }
    if (!modelOut.empty() && used) {
        used->save(modelOut);
        std::cout << "saved the predictor to " << modelOut << '\n';
    }
    if (!dbSave.empty() && used) {
        nlohmann::json evaluation = nlohmann::json::object();
        for (const auto& row : r.rows) {
            const auto& m = row.metrics;
            evaluation[row.name] = { { "q", std::isnan(row.q) ? nlohmann::json() : nlohmann::json(row.q) },
                { "rules", rulesToJson(row.rules) }, { "mean_s", m.mean }, { "median_s", m.median },
                { "p90_s", m.p90 }, { "fraction_zero", m.fractionZero },
                { "fraction_within", m.fractionWithin }, { "mean_overlap_s", m.meanOverlap },
                { "effective_fraction_within", m.effectiveWithin } };
            if (const auto ratio = ratioToBound(r, row))
                evaluation[row.name]["within_over_bound"] = *ratio;
            if (row.chain)
                evaluation[row.name]["chain"] = { { "chains", row.chain->chains },
                    { "efficiency", row.chain->efficiency }, { "mean_jobs", row.chain->meanJobs },
                    { "idle_node_hours", row.chain->meanIdleNodeHours } };
        }
        const auto stored = storeModel(*database, *used, dbSave,
            modelOut.empty() ? std::nullopt
                             : std::optional<std::string>(std::filesystem::absolute(modelOut).string()),
            { { "evaluation", evaluation }, { "tolerance_s", config.tolerance } });
        std::cout << "stored the predictor as " << dbSave << " version " << stored.version << " (models.id "
                  << stored.id << ")\n";
    }
    return 0;
}

const std::vector<ctl::Subcommand>& simCommands()
{
    static const std::vector<ctl::Subcommand> commands = [] {
        ctl::CommandSpec fit("batonctl sim fit",
            "Replay each partition of the trace for each cluster size and priority weighting;\n"
            "compare with the recorded starts; warn when the best fit is poor.");
        fit.option("trace", "FILE", "the job trace; required")
            .option("nodes", "N,N,...|auto",
                "cluster sizes to try, in nodes; auto: per partition, the recorded peak use\n"
                "and 2.5 .. 15 % below it (no recorded starts: the SWF header's size)",
                "auto")
            .option("warn-below", "R", "warn when the best fit's correlation of log waits is below R", "0.3")
            .option("weights", "A/S/P,...",
                "age/size/priority weights to try instead of the built-in six\n"
                "(1000/0/0, 1000/100/0, 1000/1000/0, 0/0/1000, 1000/100/1000, 100/10/1000)")
            .option("residuals", "FILE",
                "write every compared job's recorded and simulated wait under the best\n"
                "fit of its partition (CSV)")
            .option("max-age-days", "D", "age at which the age factor saturates", "7")
            .option("warmup-hours", "H",
                "jobs submitted in the first H hours after the first recorded start are not\n"
                "compared (the queue fills up); a trace of a few days needs less than a week",
                "168");
        addUnitOptions(fit);
        ctl::CommandSpec run(
            "batonctl sim run", "Evaluate one policy with Mirage's protocol; print a table.");
        addSchedulerOptions(run);
        addComparisonOptions(run);
        run.option(
            "policy", "POLICY", "reactive|avg|predict|checkpoint-aware|policy-gradient|oracle; required");
        ctl::CommandSpec compare("batonctl sim compare",
            "Evaluate the policies with Mirage's protocol; print a table, write DIR/compare.csv,\n"
            "DIR/interruptions.csv and DIR/interruptions.svg.");
        addSchedulerOptions(compare);
        addComparisonOptions(compare);
        compare.option("out", "DIR", "where to write the results", "sim-compare")
            .option("rl", "yes|no",
                "add the policy-gradient policy (Mirage's RL), trained on the training period\n"
                "(slow: one queue simulation per 10 min of each training probe's last 24 h)",
                "no")
            .option("oracle", "yes|no",
                "add the hindsight bound, the best submission minute of each probe found by\n"
                "trying every one (slow: one queue simulation per minute)",
                "no");
        return std::vector<ctl::Subcommand> {
            { fit, [](const ctl::ParsedCommand& o) { return fitCommand(o); } },
            { run,
                [](const ctl::ParsedCommand& o) {
                    const auto policy = o.text("policy");
                    if (policy.empty())
                        throw std::invalid_argument("--policy is required");
                    return compareCommand(o, { policy }, false);
                } },
            { compare,
                [](const ctl::ParsedCommand& o) {
                    std::vector<std::string> policies { "reactive", "avg", "predict", "checkpoint-aware" };
                    const auto oracle = o.text("oracle");
                    if (oracle != "yes" && oracle != "no")
                        throw std::invalid_argument("--oracle: expected yes or no, got '" + oracle + "'");
                    const auto rl = o.text("rl");
                    if (rl != "yes" && rl != "no")
                        throw std::invalid_argument("--rl: expected yes or no, got '" + rl + "'");
                    if (rl == "yes")
                        policies.push_back("policy-gradient");
                    if (oracle == "yes")
                        policies.push_back("oracle");
                    return compareCommand(o, std::move(policies), true);
                } },
        };
    }();
    return commands;
}

} // namespace

int runSimCommand(std::span<const std::string> args)
{
    try {
        return ctl::dispatch(
            "batonctl sim", "Queue simulator and provisioning policies.", simCommands(), args);
    } catch (const ctl::UsageError&) {
        throw; // batonctl prints it with the command's --help hint
    } catch (const std::invalid_argument& e) {
        std::cerr << "sim: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "sim: " << e.what() << '\n';
        return 1;
    }
}

} // namespace baton::sim
