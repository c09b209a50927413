// Two-level storage against one level on a slow shared file system: the training stall per checkpoint,
// the checkpoint interval the policy reaches at its overhead target, and the time from the final
// checkpoint's start to its commit in the chain directory (what a successor on another node waits for).
// Three arms, alternating within each run so that they see the same machine:
//   shared   one level, the chain directory on the slow file system (today's checkpointer)
//   two      two levels: node-local first, drained to the same slow chain directory
//   local    one level on the node-local directory alone (the speed two levels aim for)
// The targets: stall and interval of `two` within 1.2x of `local`, with every handover from a shared copy.
//
//   two_level_bench [--shared DIR] [--local DIR] [--mib N] [--seconds S] [--runs N] [--iteration-ms MS]
//   bench/checkpointer/slow_fs.sh 40 build/bench/checkpointer/two_level_bench   (--shared: the slow directory)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/session.hpp"
#include "bench/support/distribution.hpp"

namespace fs = std::filesystem;
using namespace baton::ckpt;
using SteadyClock = std::chrono::steady_clock;

namespace {

using baton::bench::Distribution;

double since(SteadyClock::time_point start)
{
    return baton::bench::secondsSince(start);
}

struct Settings {
    fs::path shared, local;
    std::size_t bytes = std::size_t(256) << 20;
    double seconds = 20;
    int runs = 3;
    double iterationSeconds = 0.05;
};

struct ArmResult {
    double stallPerCheckpoint = 0; // seconds the training thread waited, per checkpoint
    double intervalSeconds = 0; // seconds of training per checkpoint the policy took (the final aside)
    double overheadPercent = 0; // the policy's own measure
    double finalToSharedSeconds = 0; // final checkpoint requested -> committed in the chain directory
    int checkpoints = 0;
    bool finalInChain = false; // the chain directory holds the final checkpoint when the job is done
    DrainStatus drain;
};

// Spins for `seconds`, touching the state as an optimizer step would (one byte per page).
void compute(double seconds, std::vector<std::byte>& state, std::uint64_t iteration)
{
    const auto start = SteadyClock::now();
    std::size_t page = 0;
    while (since(start) < seconds) {
        for (int i = 0; i < 64 && page < state.size(); ++i, page += 4096)
            state[page] = static_cast<std::byte>(iteration);
        if (page >= state.size())
            page = 0;
    }
}

ArmResult runArm(const Settings& settings, const std::string& arm)
{
    const fs::path chain = (arm == "local" ? settings.local : settings.shared) / ("chain-" + arm);
    const fs::path local = settings.local / ("local-" + arm);
    std::error_code ec;
    fs::remove_all(chain, ec);
    fs::remove_all(local, ec);
    SessionOptions options;
    options.checkpointer.chainDir = chain;
    if (arm == "two")
        options.checkpointer.localDir = local;
    options.checkpointer.log = [](std::string_view line) { std::fprintf(stderr, "  [%s]\n", std::string(line).c_str()); };
    options.policy.targetPercent = 5;
    Session session(options);
    std::vector<std::byte> state(settings.bytes);
    std::memset(state.data(), 1, state.size());
    session.checkpointer().registerRegion("state", state.data(), state.size());
    session.checkpointer().prepareStaging();

    ArmResult result;
    double stall = 0;
    session.onCheckpoint([&](const SessionCheckpoint& done) {
        if (done.stats.committed) {
            ++result.checkpoints;
            stall += done.stats.stallSeconds;
        }
    });
    const auto start = SteadyClock::now();
    SteadyClock::time_point finalAt {};
    bool finalRequested = false;
    std::uint64_t iteration = 0;
    for (; !session.shouldExit(); ++iteration) {
        compute(settings.iterationSeconds * 0.7, state, iteration); // forward and backward
        session.beforeUpdate();
        compute(settings.iterationSeconds * 0.3, state, iteration); // the update writes the state
        if (!finalRequested && since(start) >= settings.seconds) {
            session.requestCheckpoint(true);
            finalRequested = true;
            finalAt = SteadyClock::now();
        }
        session.step(iteration);
    }
    result.finalToSharedSeconds = since(finalAt);
    result.intervalSeconds = settings.seconds / std::max(1, result.checkpoints - 1);
    result.overheadPercent = session.measuredOverheadPercent();
    result.stallPerCheckpoint = result.checkpoints > 0 ? stall / result.checkpoints : 0;
    result.drain = session.checkpointer().drainStatus();
    const auto committed = listCheckpoints(chain);
    result.finalInChain = !committed.empty() && committed.back().committed && committed.back().iteration + 1 == iteration;
    session.finish();
    fs::remove_all(chain, ec);
    fs::remove_all(local, ec);
    return result;
}

[[noreturn]] void usage(const char* message)
{
    std::fprintf(stderr,
        "two_level_bench: %s\nusage: two_level_bench [--shared DIR] [--local DIR] [--mib N] [--seconds S] [--runs N] "
        "[--iteration-ms MS]\n",
        message);
    std::exit(2);
}

Settings parse(int argc, char** argv)
{
    Settings settings;
    for (int i = 1; i < argc; ++i) {
        const std::string option = argv[i];
        if (i + 1 >= argc)
            usage(("missing value of " + option).c_str());
        const std::string value = argv[++i];
        try {
            if (option == "--shared")
                settings.shared = value;
            else if (option == "--local")
                settings.local = value;
            else if (option == "--mib")
                settings.bytes = std::stoull(value) << 20;
            else if (option == "--seconds")
                settings.seconds = std::stod(value);
            else if (option == "--runs")
                settings.runs = std::stoi(value);
            else if (option == "--iteration-ms")
                settings.iterationSeconds = std::stod(value) / 1000;
            else
                usage(("unknown option " + option).c_str());
        } catch (const std::logic_error&) {
            usage(("bad value of " + option + ": " + value).c_str());
        }
    }
    // Under slow_fs.sh: the slow directory it made, and a node-local one in the temporary directory.
    if (const char* slow = std::getenv("BATON_SLOW_DIR"); settings.shared.empty() && slow != nullptr)
        settings.shared = slow;
    if (settings.local.empty())
        settings.local = fs::temp_directory_path() / "baton-two-level-bench";
    if (settings.shared.empty())
        usage("--shared is required (or run under slow_fs.sh)");
    if (settings.bytes == 0 || settings.seconds <= 0 || settings.runs < 1 || settings.iterationSeconds <= 0)
        usage("--mib, --seconds, --runs and --iteration-ms must be positive");
    return settings;
}

} // namespace

int main(int argc, char** argv)
{
    const Settings settings = parse(argc, argv);
    fs::create_directories(settings.shared);
    fs::create_directories(settings.local);
    std::printf("two-level storage: %zu MiB of state, %.0f ms iterations, %.0f s of training per arm, %d runs\n",
        settings.bytes >> 20, settings.iterationSeconds * 1000, settings.seconds, settings.runs);
    std::printf("shared (slow) %s, node-local %s\n\n", settings.shared.c_str(), settings.local.c_str());
    const std::vector<std::string> arms { "shared", "two", "local" };
    std::map<std::string, std::vector<ArmResult>> results;
    std::printf("%-4s %-7s %11s %10s %10s %14s %6s %s\n", "run", "arm", "stall/ckpt", "interval", "overhead",
        "final->chain", "ckpts", "drain (drained/skipped/retries)");
    for (int run = 1; run <= settings.runs; ++run) {
        for (const auto& arm : arms) {
            const ArmResult r = runArm(settings, arm);
            results[arm].push_back(r);
            char drain[64] = "-";
            if (r.drain.twoLevel)
                std::snprintf(drain, sizeof drain, "%llu/%llu/%llu", static_cast<unsigned long long>(r.drain.drained),
                    static_cast<unsigned long long>(r.drain.skipped), static_cast<unsigned long long>(r.drain.retries));
            std::printf("%-4d %-7s %9.1f ms %8.2f s %8.2f %% %12.2f s %6d %s%s\n", run, arm.c_str(),
                r.stallPerCheckpoint * 1000, r.intervalSeconds, r.overheadPercent, r.finalToSharedSeconds,
                r.checkpoints, drain, r.finalInChain ? "" : "  FINAL NOT IN THE CHAIN DIRECTORY");
            std::fflush(stdout);
        }
    }
    auto figure = [&](const std::string& arm, double ArmResult::*field, double scale) {
        Distribution values;
        for (const auto& r : results[arm])
            values.add(r.*field);
        return values.text(scale == 1 ? 2 : 1, scale);
    };
    auto ratio = [&](const std::string& arm, double ArmResult::*field) {
        Distribution values;
        for (int i = 0; i < settings.runs; ++i) {
            const double base = results["local"][i].*field;
            if (base > 0)
                values.add(results[arm][i].*field / base);
        }
        return values.text(2);
    };
    std::printf("\nmedian (min-max) of %d runs      shared (one level)   two levels           node-local alone\n",
        settings.runs);
    std::printf("stall per checkpoint (ms)       %-20s %-20s %s\n",
        figure("shared", &ArmResult::stallPerCheckpoint, 1000).c_str(),
        figure("two", &ArmResult::stallPerCheckpoint, 1000).c_str(),
        figure("local", &ArmResult::stallPerCheckpoint, 1000).c_str());
    std::printf("interval (s of training/ckpt)   %-20s %-20s %s\n", figure("shared", &ArmResult::intervalSeconds, 1).c_str(),
        figure("two", &ArmResult::intervalSeconds, 1).c_str(), figure("local", &ArmResult::intervalSeconds, 1).c_str());
    std::printf("final -> chain commit (s)       %-20s %-20s %s\n",
        figure("shared", &ArmResult::finalToSharedSeconds, 1).c_str(),
        figure("two", &ArmResult::finalToSharedSeconds, 1).c_str(), "-");
    std::printf("\nratios to node-local alone, taken within each run (target for two levels: <= 1.2):\n");
    std::printf("  stall:    shared %s, two levels %s\n", ratio("shared", &ArmResult::stallPerCheckpoint).c_str(),
        ratio("two", &ArmResult::stallPerCheckpoint).c_str());
    std::printf("  interval: shared %s, two levels %s\n", ratio("shared", &ArmResult::intervalSeconds).c_str(),
        ratio("two", &ArmResult::intervalSeconds).c_str());
    bool allInChain = true;
    for (const auto& r : results["two"])
        allInChain = allInChain && r.finalInChain;
    std::printf("every two-level final checkpoint committed in the chain directory before the job ended: %s\n",
        allInChain ? "yes" : "NO");
    return allInChain ? 0 : 1;
}
