#include "validation.hpp"

#include "simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace baton::sim {

FitReport validateReplay(std::shared_ptr<const std::vector<Job>> trace, const SchedulerConfig& config,
    std::int64_t from, std::vector<JobWait>* waits)
{
    const auto t0 = std::chrono::steady_clock::now();
    Simulator sim(trace, config);
    std::vector<std::int64_t> starts(trace->size(), -1);
    sim.recordStartsInto(&starts);
    sim.runToEnd();
    FitReport r;
    r.replaySeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::vector<double> recorded, simulated, logRec, logSim, absErr;
    for (std::size_t i = 0; i < trace->size(); ++i) {
        const Job& j = (*trace)[i];
        if (j.submit < from || j.recordedStart < j.submit || starts[i] < 0)
            continue;
        const auto rec = static_cast<double>(j.recordedStart - j.submit);
        const auto sim = static_cast<double>(starts[i] - j.submit);
        recorded.push_back(rec);
        simulated.push_back(sim);
        logRec.push_back(std::log1p(rec));
        logSim.push_back(std::log1p(sim));
        absErr.push_back(std::abs(sim - rec));
        if (waits)
            waits->push_back({ &j, j.recordedStart - j.submit, starts[i] - j.submit });
    }
    r.jobs = recorded.size();
    if (r.jobs == 0)
        return r;
    r.medianAbsError = quantile(absErr, 0.5);
    r.p90AbsError = quantile(absErr, 0.9);
    r.correlation = pearson(recorded, simulated);
    r.logCorrelation = pearson(logRec, logSim);
    r.recordedMeanWait = std::accumulate(recorded.begin(), recorded.end(), 0.0) / static_cast<double>(r.jobs);
    r.simulatedMeanWait
        = std::accumulate(simulated.begin(), simulated.end(), 0.0) / static_cast<double>(r.jobs);
    return r;
}

} // namespace baton::sim
