// Real-time behaviour of the session on the real checkpointer: the final checkpoint before a deadline
// and checkpoints on SIGUSR1 sent at random moments.
#include "baton/ckpt/session.hpp"

#include "baton/ckpt/chain.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

using namespace baton::ckpt;
using baton::test::TempDir;

namespace {

double unixNow()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double createdUnix(const std::filesystem::path& dir)
{
    std::ifstream in(dir / "manifest.json");
    std::stringstream text;
    text << in.rdbuf();
    return parseManifest(text.str()).document.at("created_unix").get<double>();
}

struct Started {
    double at;
    std::uint64_t iteration;
    CheckpointReason reason;
};

// Twelve SIGUSR1 to this process at random moments (their times in `sent`), then SIGTERM.
void sendSignals(std::vector<double>& sent, std::mutex& sentMutex)
{
    std::mt19937 random(12345);
    std::uniform_int_distribution<int> gap(250, 900);
    std::this_thread::sleep_for(std::chrono::milliseconds(600)); // past the profiling
    for (int i = 0; i < 12; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(gap(random)));
        {
            std::lock_guard lock(sentMutex);
            sent.push_back(unixNow());
        }
        kill(getpid(), SIGUSR1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    kill(getpid(), SIGTERM);
}

// After each signal sent, the first commit and that of a checkpoint started for it, within their bounds.
void expectSignalsAnswered(const std::vector<double>& sent, const std::vector<Started>& started,
    std::map<std::uint64_t, double>& commitTimes, double maxIteration, double maxCheckpoint)
{
    const double slack = 0.25; // scheduling on a loaded machine
    double worstFirst = 0;
    double worstFresh = 0;
    for (double at : sent) {
        double first = 1e300;
        for (const auto& [iteration, time] : commitTimes)
            if (time >= at)
                first = std::min(first, time);
        EXPECT_LE(first - at, maxIteration + maxCheckpoint + slack)
            << "signal at " << at << ": max iteration " << maxIteration << " s, max checkpoint "
            << maxCheckpoint;
        // A checkpoint started after the signal, for the signal, and committed.
        const auto fresh = std::find_if(started.begin(), started.end(), [&](const Started& s) {
            return s.at >= at
                && (s.reason == CheckpointReason::Signal || s.reason == CheckpointReason::Terminate);
        });
        ASSERT_NE(fresh, started.end());
        ASSERT_TRUE(commitTimes.count(fresh->iteration))
            << "iteration " << fresh->iteration << " never committed";
        EXPECT_LE(commitTimes[fresh->iteration] - at, maxIteration + 2 * maxCheckpoint + slack);
        worstFirst = std::max(worstFirst, first - at);
        worstFresh = std::max(worstFresh, commitTimes[fresh->iteration] - at);
    }
    std::printf("%zu SIGUSR1: first commit after <= %.3f s, a fresh checkpoint committed after <= %.3f s "
                "(max iteration %.3f s, max snapshot + persist %.3f s)\n",
        sent.size(), worstFirst, worstFresh, maxIteration, maxCheckpoint);
}

} // namespace

// Twenty jobs at once, each with a deadline 20 s away and a 3 s margin: every one commits its final
// checkpoint before deadline − margin and then exits.
TEST(RealTime, FinalCheckpointBeforeDeadlineTwentyOfTwenty)
{
    constexpr int runs = 20;
    constexpr double margin = 3.0;
    TempDir root("baton-deadline");
    const double deadline = unixNow() + 20.0;
    std::vector<baton::test::ProcessResult> results(runs);
    std::vector<std::thread> threads;
    for (int i = 0; i < runs; ++i) {
        threads.emplace_back([&, i] {
            const auto dir = root.path() / ("chain-" + std::to_string(i));
            results[i] = baton::test::run(
                { "env", "BATON_CHAIN_DIR=" + dir.string(), "BATON_DEADLINE=" + std::to_string(deadline),
                    "BATON_DEADLINE_MARGIN=" + std::to_string(margin), "BATON_KEEP=2", SESSION_JOB, "100",
                    "1", "40" },
                std::chrono::seconds(50));
        });
    }
    for (auto& thread : threads)
        thread.join();
    int met = 0;
    double earliest = 1e300;
    double latest = -1e300;
    for (int i = 0; i < runs; ++i) {
        const auto& result = results[i];
        ASSERT_EQ(result.exitCode, 0) << result.output;
        const auto at = result.output.find("final committed_unix=");
        ASSERT_NE(at, std::string::npos) << result.output;
        const double committed = std::stod(result.output.substr(at + 21));
        EXPECT_LE(committed, deadline - margin) << "run " << i << "\n" << result.output;
        // Not absurdly early either: the last 5 s before deadline − margin.
        EXPECT_GE(committed, deadline - margin - 5.0) << "run " << i;
        const auto checkpoints = listCheckpoints(root.path() / ("chain-" + std::to_string(i)));
        ASSERT_FALSE(checkpoints.empty());
        EXPECT_LE(createdUnix(checkpoints.back().dir), deadline - margin);
        met += committed <= deadline - margin;
        earliest = std::min(earliest, deadline - margin - committed);
        latest = std::max(latest, deadline - margin - committed);
    }
    EXPECT_EQ(met, runs);
    std::printf(
        "final checkpoint committed before deadline - margin in %d of %d runs, %.2f to %.2f s ahead\n", met,
        runs, earliest, latest);
}

// SIGUSR1 at random moments: after each, a checkpoint commits within one iteration plus one snapshot
// and persist (the one in flight, or a new one), and a checkpoint of a later iteration commits within
// one iteration plus two of them (an in-flight one must finish first). SIGTERM ends the job cleanly.
TEST(RealTime, Usr1AtRandomMomentsYieldsACommittedCheckpoint)
{
    TempDir dir("baton-signals");
    SessionOptions options;
    options.checkpointer.chainDir = dir.path();
    options.checkpointer.keep = 100000;
    options.checkpointer.log = [](std::string_view) {};
    options.policy.targetPercent = 1.0; // sparse interval checkpoints: most commits come from signals
    options.handleSignals = true;
    Session session(options);
    std::vector<std::uint64_t> state(2 << 17); // 2 MiB
    session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);

    struct Committed {
        std::uint64_t iteration;
        double snapshot;
        double persist;
    };
    std::vector<Started> started;
    std::vector<Committed> committed;
    session.onCheckpoint([&](const SessionCheckpoint& done) {
        if (done.stats.committed)
            committed.push_back(
                { done.stats.iteration, done.stats.snapshotSeconds, done.stats.persistSeconds });
    });

    std::vector<double> sent;
    std::mutex sentMutex;
    std::atomic<bool> done { false };
    std::thread sender([&] {
        sendSignals(sent, sentMutex);
        done = true;
    });
    double maxIteration = 0;
    double last = unixNow();
    for (std::uint64_t it = 0; !session.shouldExit() && unixNow() - last < 30; ++it) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        session.beforeUpdate();
        std::fill(state.begin(), state.end(), it);
        const Decision decision = session.step(it);
        const double now = unixNow();
        if (it > 0)
            maxIteration = std::max(maxIteration, now - last);
        last = now;
        if (decision.checkpoint)
            started.push_back({ now, it, decision.reason });
    }
    sender.join();
    ASSERT_TRUE(done);
    ASSERT_TRUE(session.shouldExit()) << "SIGTERM must end the job after a final checkpoint";
    ASSERT_FALSE(started.empty());
    EXPECT_EQ(started.back().reason, CheckpointReason::Terminate);

    double maxCheckpoint = 0;
    for (const auto& c : committed)
        maxCheckpoint = std::max(maxCheckpoint, c.snapshot + c.persist);
    std::map<std::uint64_t, double> commitTimes;
    for (const auto& info : listCheckpoints(dir.path()))
        if (info.committed)
            commitTimes[info.iteration] = createdUnix(info.dir);
    expectSignalsAnswered(sent, started, commitTimes, maxIteration, maxCheckpoint);
}
