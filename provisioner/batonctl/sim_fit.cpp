#include "sim_command.hpp"

#include "sim/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace baton::sim::cli {

namespace {

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

struct Weights {
    double age, size, recorded;
};

// The priority weightings to try: --weights AGE/SIZE/PRIORITY,..., else a built-in grid.
std::vector<Weights> weightGrid(const ctl::ParsedCommand& o)
{
    const auto given = o.text("weights");
    if (given.empty())
        return { { 1000, 0, 0 }, { 1000, 100, 0 }, { 1000, 1000, 0 }, { 0, 0, 1000 }, { 1000, 100, 1000 },
            { 100, 10, 1000 } };
    std::vector<Weights> grid;
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
    return grid;
}

// One replay of the grid: its figures, its table line, and what it takes to replay it again.
struct FitRow {
    FitReport fit;
    std::string line;
    std::shared_ptr<const std::vector<Job>> trace;
    SchedulerConfig config;
    std::int64_t from;
};

// Replays the partition's jobs for every size and weighting, printing a line each.
std::vector<FitRow> replayGrid(const ctl::ParsedCommand& o, const std::vector<Job>& jobs,
    const std::vector<int>& sizes, const std::vector<Weights>& grid)
{
    std::vector<FitRow> rows;
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
            applyQueueRules(o, c);
            const auto r = validateReplay(trace, c, from);
            char line[256];
            std::snprintf(line, sizeof line,
                "%7d %8zu %6.0f %6.0f %6.0f %7zu %10.0f %10.0f %7.3f %8.3f %9.0f %9.0f %7.2f", n,
                dropped.neverFit, w.age, w.size, w.recorded, r.jobs, r.medianAbsError, r.p90AbsError,
                r.correlation, r.logCorrelation, r.recordedMeanWait, r.simulatedMeanWait, r.replaySeconds);
            std::puts(line);
            rows.push_back({ r, line, trace, c, from });
        }
    }
    return rows;
}

// Best fit: the smallest sum of ranks over the four figures (both errors low, both correlations high),
// so that no single figure decides.
const FitRow& bestFit(const std::vector<FitRow>& rows)
{
    std::vector<double> score(rows.size(), 0);
    auto rankBy = [&](auto key) {
        std::vector<std::size_t> idx(rows.size());
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(),
            [&](std::size_t a, std::size_t b) { return key(rows[a]) < key(rows[b]); });
        for (std::size_t r = 0; r < idx.size(); ++r)
            score[idx[r]] += static_cast<double>(r);
    };
    rankBy([](const FitRow& r) { return r.fit.medianAbsError; });
    rankBy([](const FitRow& r) { return r.fit.p90AbsError; });
    rankBy([](const FitRow& r) { return -r.fit.correlation; });
    rankBy([](const FitRow& r) { return -r.fit.logCorrelation; });
    return rows[std::min_element(score.begin(), score.end()) - score.begin()];
}

// --residuals: every compared job's recorded and simulated wait under each partition's best fit, to see
// which jobs the replay gets wrong (by wait, size, user, time).
class Residuals {
public:
    explicit Residuals(std::string path)
        : path_(std::move(path))
    {
        if (path_.empty())
            return;
        out_.open(path_);
        if (!out_)
            throw std::runtime_error("cannot write " + path_);
        out_ << "partition,id,user,units,submit,limit_s,run_time_s,recorded_wait_s,simulated_wait_s\n";
    }

    void write(const std::string& partition, const FitRow& best)
    {
        if (!out_.is_open())
            return;
        std::vector<JobWait> waits;
        validateReplay(best.trace, best.config, best.from, &waits);
        for (const auto& w : waits)
            out_ << partitionLabel(partition) << ',' << w.job->id << ',' << w.job->user << ',' << w.job->nodes
                 << ',' << w.job->submit << ',' << w.job->limit << ',' << w.job->runTime << ',' << w.recorded
                 << ',' << w.simulated << '\n';
        if (!out_)
            throw std::runtime_error("cannot write " + path_);
    }

private:
    std::string path_;
    std::ofstream out_;
};

// Fits one partition and prints its table and best fit; false when the fit is poor or cannot be judged.
bool fitPartition(const ctl::ParsedCommand& o, const LoadedJobs& loaded, const std::string& partition,
    const std::vector<Weights>& grid, double warnBelow, Residuals& residuals)
{
    const auto unit = std::string(unitName(loaded.plan.unit));
    const auto jobs = loaded.jobsOf(partition);
    const auto sizes = fitSizes(o, loaded, jobs);
    const auto label = partitionLabel(partition);
    std::printf("partition %s: %zu jobs, recorded peak use %lld %s\n", label.c_str(), jobs.size(),
        static_cast<long long>(recordedPeakUsage(jobs)), unit.c_str());
    std::printf("%7s %8s %6s %6s %6s %7s %10s %10s %7s %8s %9s %9s %7s\n", unit.c_str(), "neverfit", "age",
        "size", "prio", "jobs", "medAE(s)", "p90AE(s)", "corr", "logcorr", "recMean", "simMean", "sec");
    const auto rows = replayGrid(o, jobs, sizes, grid);
    if (rows.empty()) {
        std::printf("partition %s: no job fits any size tried\n", label.c_str());
        return false;
    }
    const auto& best = bestFit(rows);
    std::printf("best fit for partition %s (smallest rank sum of medAE, p90AE, -corr, -logcorr):\n%s\n",
        label.c_str(), best.line.c_str());
    residuals.write(partition, best);
    // A queue unlike the real one makes every policy figure measured on it meaningless.
    if (best.fit.jobs == 0) {
        std::printf("WARNING: partition %s: no job submitted after the warm-up has a recorded "
                    "start, so the fit cannot be judged (a model-generated trace?)\n",
            label.c_str());
        return false;
    }
    if (!(best.fit.logCorrelation >= warnBelow)) {
        std::printf("WARNING: partition %s fits poorly: correlation of log waits %.3f < %.2f; the "
                    "simulated queue is unlike the recorded one, so do not trust policies evaluated on "
                    "it\n",
            label.c_str(), best.fit.logCorrelation, warnBelow);
        return false;
    }
    return true;
}

} // namespace

int fitCommand(const ctl::ParsedCommand& o)
{
    const auto loaded = loadReported(o);
    const double warnBelow = o.number("warn-below");
    std::vector<std::string> partitions = loaded.partitions;
    if (o.has("partition"))
        partitions = { choosePartition(o, loaded) };
    const auto grid = weightGrid(o);
    Residuals residuals(o.text("residuals"));
    int poor = 0;
    for (const auto& partition : partitions)
        if (!fitPartition(o, loaded, partition, grid, warnBelow, residuals))
            ++poor;
    if (poor)
        std::fprintf(stderr, "sim fit: %d of %zu partitions fit poorly or could not be judged\n", poor,
            partitions.size());
    return 0;
}

} // namespace baton::sim::cli
