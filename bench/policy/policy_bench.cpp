// Chosen checkpoint interval vs the oracle interval on synthetic training loops (simulated clock).
// The oracle k is the smallest fixed k whose measured overhead is <= p, found by sweeping k over the
// same job, among the k at which checkpoints never queue; targets: the policy's measured overhead <= p and
// its k <= 1.25 x the oracle k.
#include "baton/ckpt/interval.hpp"
#include "baton/ckpt/policy.hpp"
#include "baton/ckpt/simulation.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace baton::ckpt;

namespace {

constexpr std::uint64_t iterations = 20000;
constexpr std::uint64_t warmup = 2000; // profiling and first adaptation, left out of the overhead

struct Job {
    const char* name;
    SyntheticJobOptions options;
};

std::uint64_t oracleInterval(const SyntheticJobOptions& options, double p, double& overhead)
{
    for (std::uint64_t k = 1; k <= 5000; ++k) {
        SyntheticJob job(options);
        overhead = runFixedInterval(job, k, iterations, warmup);
        // A k at which checkpoints queue does not checkpoint every k iterations: not a candidate.
        if (overhead <= p && job.refused() == 0)
            return k;
    }
    return 0;
}

} // namespace

int main()
{
    std::vector<Job> jobs;
    SyntheticJobOptions base;
    base.jitter = 0.02;
    jobs.push_back({ "host snapshot", base });
    SyntheticJobOptions storage = base;
    storage.snapshotSeconds = 0.08;
    storage.persistSeconds = 6.0;
    jobs.push_back({ "slow storage", storage });
    SyntheticJobOptions large = base;
    large.computeSeconds = 0.5;
    large.updateSeconds = 0.1;
    large.snapshotSeconds = 1.2;
    large.persistSeconds = 8.0;
    large.persistSlowdown = 0.03;
    jobs.push_back({ "large model", large });
    SyntheticJobOptions noisy = base;
    noisy.jitter = 0.2;
    jobs.push_back({ "noisy iterations", noisy });

    std::printf("%-17s %5s %8s %8s %8s %8s %10s %10s %14s  %s\n", "job", "p %", "oracle k", "chosen k",
        "ratio", "profiled", "overhead %", "estimate %", "k (o/k*t*100)", "targets");
    bool allMet = true;
    for (double p : { 5.0, 3.5 }) {
        for (const Job& entry : jobs) {
            double oracleOverhead = 0;
            const std::uint64_t oracle = oracleInterval(entry.options, p, oracleOverhead);

            SyntheticJob job(entry.options);
            PolicyOptions options;
            options.targetPercent = p;
            Policy policy(options, [&] { return job.now(); });
            const double overhead = runSynthetic(policy, job, iterations, warmup);
            const std::uint64_t chosen = policy.interval();
            const std::uint64_t profiled = policy.changes().empty() ? chosen : policy.changes().front().from;

            // CheckFreq's precedence: o/k*t*100 <= p  <=>  k >= o*t*100/p.
            const Profile& profile = policy.profile();
            const double wrong = profile.stallSeconds * profile.iterationSeconds * 100.0 / p;
            const auto checkFreqK = static_cast<std::uint64_t>(std::max(1.0, std::ceil(wrong)));

            const double ratio = oracle > 0 ? static_cast<double>(chosen) / static_cast<double>(oracle) : 0;
            const bool met = overhead <= p && ratio <= 1.25;
            allMet = allMet && met;
            std::printf("%-17s %5.1f %8llu %8llu %8.2f %8llu %10.2f %10.2f %14llu  %s\n", entry.name, p,
                static_cast<unsigned long long>(oracle), static_cast<unsigned long long>(chosen), ratio,
                static_cast<unsigned long long>(profiled), overhead, policy.measuredOverheadPercent(),
                static_cast<unsigned long long>(checkFreqK), met ? "met" : "MISSED");
        }
    }
    std::printf("\n%llu iterations per run, overhead measured over the last %llu; oracle = smallest fixed k "
                "with overhead <= p (sweep).\n",
        static_cast<unsigned long long>(iterations), static_cast<unsigned long long>(iterations - warmup));
    return allMet ? 0 : 1;
}
