// Benchmark of one batond tick on a busy cluster: a synthetic squeue --json document of 10,000 jobs
// (each with the full field set of a recorded document: Slurm 22.05's tests/data/squeue_2205.json, then
// 24.11's squeue_2411.json) is parsed, turned into a LiveQueue and the features of 1,000 chains'
// successors are computed. Figures: p50/p99 of each step
// and of the whole tick against the 50 ms target, with ratios against baselines measured in this run
// (a DOM parse of the same document with nlohmann::json; the features one chain at a time).
#include "bench/support/synthetic_squeue.hpp"
#include "policy/live_queue.hpp"
#include "slurm/squeue_json.hpp"

#include "policy/features.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace baton::slurm;
using baton::sim::Feature;
using baton::sim::JobShape;

namespace {

constexpr int clusterNodes = 20000;
constexpr int jobCount = 10000;
constexpr int chainCount = 1000;
constexpr double targetMs = 50;
constexpr std::int64_t now = 1'795'000'000;

struct Stats {
    double p50 = 0, p99 = 0;
};

Stats stats(std::vector<double> ms)
{
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) {
        return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * static_cast<double>(ms.size())))];
    };
    return { at(0.5), at(0.99) };
}

double msSince(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Runs the benchmark on a document in the form of Slurm `release` ("2205" or "2411").
void benchmark(const std::string& release)
{
    baton::bench::SyntheticQueue shape;
    shape.release = release;
    shape.jobs = jobCount;
    shape.clusterNodes = clusterNodes;
    shape.now = now;
    const std::string doc = baton::bench::syntheticSqueueDocument(shape);
    std::mt19937_64 rng(7);
    std::vector<JobShape> shapes;
    for (int c = 0; c < chainCount; ++c)
        shapes.push_back(
            { static_cast<int>(1 + rng() % 32), static_cast<std::int64_t>(1 + rng() % 48) * 3600 });

    const int rounds = 100;
    std::vector<double> parseMs, queueMs, featuresMs, tickMs;
    std::size_t pending = 0, running = 0;
    float checksum = 0;
    for (int r = 0; r < rounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto snapshot = parseSqueueJson(doc, now);
        parseMs.push_back(msSince(t0));
        const auto t1 = std::chrono::steady_clock::now();
        const LiveQueue live(snapshot, { .totalNodes = clusterNodes });
        queueMs.push_back(msSince(t1));
        const auto t2 = std::chrono::steady_clock::now();
        const auto features = queueFeatures(live, std::span<const JobShape>(shapes));
        featuresMs.push_back(msSince(t2));
        tickMs.push_back(msSince(t0));
        pending = live.pending().size();
        running = live.running().size();
        checksum += at(features.back(), Feature::HoursUntilStartFcfs);
    }

    // Baselines: a DOM parse of the same document, and the features one chain at a time.
    std::vector<double> domMs, oneByOneMs;
    for (int r = 0; r < 10; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto parsed = nlohmann::json::parse(doc);
        domMs.push_back(msSince(t0));
        checksum += static_cast<float>(parsed["jobs"].size());
    }
    {
        const LiveQueue live(parseSqueueJson(doc, now), { .totalNodes = clusterNodes });
        for (int r = 0; r < 3; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (const auto& s : shapes)
                checksum += at(queueFeatures(static_cast<const baton::sim::QueueView&>(live), s),
                    Feature::HoursUntilStartFcfs);
            oneByOneMs.push_back(msSince(t0));
        }
    }

    const auto parse = stats(parseMs), queue = stats(queueMs), feats = stats(featuresMs),
               tick = stats(tickMs);
    const auto dom = stats(domMs), oneByOne = stats(oneByOneMs);
    std::printf("\ntick: Slurm %s.%s squeue --json of %d jobs (%.1f MB; %zu pending, %zu running on %d "
                "nodes), %d chains, %d rounds\n",
        release.substr(0, 2).c_str(), release.substr(2).c_str(), jobCount,
        static_cast<double>(doc.size()) / 1e6, pending, running, clusterNodes, chainCount, rounds);
    std::printf("%-34s %9s %9s %12s\n", "step", "p50 ms", "p99 ms", "p50 ratio");
    std::printf("%-34s %9.2f %9.2f %12s\n", "parse (squeue_json)", parse.p50, parse.p99, "");
    std::printf("%-34s %9.2f %9.2f %12.2f\n", "  baseline: nlohmann DOM parse", dom.p50, dom.p99,
        dom.p50 / parse.p50);
    std::printf("%-34s %9.2f %9.2f %12s\n", "LiveQueue", queue.p50, queue.p99, "");
    std::printf("%-34s %9.2f %9.2f %12s\n", "features, 1,000 chains (batch)", feats.p50, feats.p99, "");
    std::printf("%-34s %9.2f %9.2f %12.2f\n", "  baseline: one chain at a time", oneByOne.p50, oneByOne.p99,
        oneByOne.p50 / feats.p50);
    std::printf("%-34s %9.2f %9.2f %12s\n", "whole tick", tick.p50, tick.p99, "");
    std::printf("target %.0f ms: p50 %.2f of it, p99 %.2f of it -> %s\n", targetMs, tick.p50 / targetMs,
        tick.p99 / targetMs, tick.p99 <= targetMs ? "met" : "MISSED");
    std::printf("(checksum %.1f)\n", static_cast<double>(checksum));
}

} // namespace

int main()
{
    for (const char* release : { "2205", "2411" })
        benchmark(release);
    return 0;
}
