// Checkpointer benchmark: snapshot, persist and restore bandwidth against their physical baselines
// (multi-threaded memcpy, dd-style write + fsync, sequential read), and the training stall of a
// synthetic loop for baton, a synchronous write of the state, and no checkpointing.
//
//   ckpt_bench [--dir DIR] [--size-mib N] [--loop-mib N[,N...]] [--large] [--runs N] [--iterations N]
//
// Every figure is a distribution over --runs runs: the median and the range (min-max). Baton and its
// baseline alternate within a run, so that both see the same moment of the machine, and every ratio is
// taken within a run. The training loop reports the first checkpoint apart from the later ones and
// splits the training thread's stall into its phases. --large adds the 2 GiB loop (slow on small
// disks); --loop-mib 0 skips the loops. Reads are measured cold: the page cache of every file read is
// dropped with posix_fadvise(DONTNEED) first, for baton and baseline alike.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "baton/ckpt/adaptive.hpp"
#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/manifest.hpp"
#include "bench/support/distribution.hpp"
#include "bench/support/page_cache.hpp"
#include "checkpointer/src/io.hpp"
#include "checkpointer/src/thread_pool.hpp"

namespace fs = std::filesystem;
using namespace baton::ckpt;
using Clock = std::chrono::steady_clock;
using baton::bench::Distribution;
using baton::bench::dropCache;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double since(Clock::time_point start)
{
    return baton::bench::secondsSince(start);
}

void parallelMemcpy(std::byte* to, const std::byte* from, std::size_t size, unsigned threads)
{
    std::vector<std::thread> workers;
    std::size_t share = (size + threads - 1) / threads;
    for (unsigned t = 0; t < threads; ++t) {
        std::size_t begin = std::min(size, t * share), end = std::min(size, begin + share);
        workers.emplace_back([=] { std::memcpy(to + begin, from + begin, end - begin); });
    }
    for (auto& w : workers)
        w.join();
}

// dd if=... of=file bs=1M conv=fsync
double ddWrite(const fs::path& file, const std::byte* data, std::size_t size)
{
    auto start = Clock::now();
    io::Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    for (std::size_t at = 0; at < size;) {
        ssize_t n = ::write(fd.get(), data + at, std::min<std::size_t>(1 << 20, size - at));
        if (n <= 0)
            io::throwErrno("write " + file.string());
        at += static_cast<std::size_t>(n);
    }
    if (::fsync(fd.get()) != 0)
        io::throwErrno("fsync " + file.string());
    fd.close(file.string());
    return since(start);
}

// dd if=file bs=1M into memory, cold.
double ddRead(const fs::path& file, std::byte* into, std::size_t size)
{
    dropCache(file);
    auto start = Clock::now();
    io::Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    for (std::size_t at = 0; at < size;) {
        ssize_t n = ::read(fd.get(), into + at, std::min<std::size_t>(1 << 20, size - at));
        if (n <= 0)
            io::throwErrno("read " + file.string());
        at += static_cast<std::size_t>(n);
    }
    return since(start);
}

// ---- bandwidth: snapshot, persist, restore --------------------------------------------------------

struct BandwidthRow {
    std::string what;
    Distribution baton, baseline, ratio; // GB/s, GB/s, baton / baseline within a run
    std::string target;
};

void printBandwidth(std::size_t sizeMib, int runs, const std::vector<BandwidthRow>& rows)
{
    std::printf("\nbandwidth, %zu MiB, GB/s, median (min-max) of %d runs; ratio taken within each run\n",
        sizeMib, runs);
    std::printf(
        "| %-40s | %-22s | %-22s | %-22s | %-8s |\n", "figure", "baton", "baseline", "ratio", "target");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(42, '-').c_str(), std::string(24, '-').c_str(),
        std::string(24, '-').c_str(), std::string(24, '-').c_str(), std::string(10, '-').c_str());
    for (const auto& r : rows)
        std::printf("| %-40s | %-22s | %-22s | %-22s | %-8s |\n", r.what.c_str(), r.baton.text(2).c_str(),
            r.baseline.text(2).c_str(), r.ratio.text(2).c_str(), r.target.c_str());
    std::fflush(stdout);
}

std::vector<BandwidthRow> bandwidth(const fs::path& root, std::size_t size, int runs)
{
    fs::path chain = root / "bandwidth";
    Options options;
    options.chainDir = chain;
    options.keep = 1;
    options.stagingBytes = size;
    Checkpointer ckpt(options);
    const unsigned threads = defaultCopyThreads(); // the checkpointer's own, for a like-for-like memcpy

    std::vector<std::byte> state(size);
    for (std::size_t i = 0; i < size; i += 8)
        std::memcpy(&state[i], &i, std::min<std::size_t>(8, size - i));
    ckpt.registerRegion("weights", state.data(), size);

    const double gb = static_cast<double>(size) / kMiB / 1024.0;
    BandwidthRow snapshot { "snapshot vs " + std::to_string(threads) + "-thread memcpy", {}, {}, {},
        ">= 0.85x" };
    BandwidthRow persist { "persist vs write+fsync (dd conv=fsync)", {}, {}, {}, ">= 0.9x" };
    BandwidthRow restore { "restore (read+verify+copy) vs cold read", {}, {}, {}, ">= 0.9x" };
    auto record = [&](BandwidthRow& row, double batonSeconds, double baselineSeconds) {
        row.baton.add(gb / batonSeconds);
        row.baseline.add(gb / baselineSeconds);
        row.ratio.add(baselineSeconds / batonSeconds);
    };

    io::AlignedBuffer target(size);
    std::uint64_t iteration = 0;
    // The first checkpoint allocates and touches the staging pool: not a bandwidth, left out.
    if (!ckpt.checkpointNow(++iteration))
        throw Error("checkpoint failed: " + ckpt.lastError());
    for (int r = 0; r < runs; ++r) {
        const bool batonFirst = r % 2 == 0;
        auto snapBaton = [&] {
            if (!ckpt.requestCheckpoint(++iteration))
                throw Error("checkpoint did not start: " + ckpt.lastError());
            ckpt.beforeUpdate();
            double seconds = ckpt.lastCheckpoint().snapshotSeconds;
            if (!ckpt.wait())
                throw Error("checkpoint failed: " + ckpt.lastError());
            return seconds;
        };
        auto snapMemcpy = [&] {
            auto start = Clock::now();
            parallelMemcpy(target.data(), state.data(), size, threads);
            return since(start);
        };
        double a = batonFirst ? snapBaton() : snapMemcpy();
        double b = batonFirst ? snapMemcpy() : snapBaton();
        record(snapshot, batonFirst ? a : b, batonFirst ? b : a);

        auto persistBaton = [&] {
            if (!ckpt.checkpointNow(++iteration))
                throw Error("checkpoint failed: " + ckpt.lastError());
            return ckpt.lastCheckpoint().persistSeconds;
        };
        auto persistDd = [&] { return ddWrite(root / "dd.bin", state.data(), size); };
        a = batonFirst ? persistBaton() : persistDd();
        b = batonFirst ? persistDd() : persistBaton();
        record(persist, batonFirst ? a : b, batonFirst ? b : a);

        auto restoreBaton = [&] {
            dropCache(chain / checkpointDirName(iteration) / kDataFileName);
            auto start = Clock::now();
            auto restored = ckpt.restore();
            double seconds = since(start);
            if (!restored.restored)
                throw Error("restore found nothing");
            return seconds;
        };
        auto restoreDd = [&] { return ddRead(root / "dd.bin", target.data(), size); };
        a = batonFirst ? restoreBaton() : restoreDd();
        b = batonFirst ? restoreDd() : restoreBaton();
        record(restore, batonFirst ? a : b, batonFirst ? b : a);
        fs::remove(root / "dd.bin");
    }
    return { snapshot, persist, restore };
}

// ---- training loop ---------------------------------------------------------------------------------

// Stands in for the GPU's forward and backward pass as the training thread sees it: the thread waits in
// the synchronising call, spinning (CUDA's default while threads do not outnumber cores), until the
// device is done 100 ms after the step began. The device's time does not depend on the host: being
// preempted only delays the thread's return. (A sleeping stand-in measured the machine's wake-up latency
// instead: 30 ms an iteration on an idle virtual machine, less when other threads kept it awake.)
void deviceStep()
{
    const auto done = Clock::now() + std::chrono::milliseconds(100);
    while (Clock::now() < done) { }
}

enum class Mode { None, Baton, SyncWriteFsync, SyncWrite };
constexpr Mode kModes[] = { Mode::None, Mode::Baton, Mode::SyncWriteFsync, Mode::SyncWrite };

const char* modeName(Mode mode)
{
    switch (mode) {
    case Mode::None:
        return "none";
    case Mode::Baton:
        return "baton";
    case Mode::SyncWriteFsync:
        return "sync write + fsync";
    case Mode::SyncWrite:
        return "sync write (no fsync)";
    }
    return "?";
}

// Where one checkpoint's stall of the training thread went, in seconds.
struct StallPhases {
    double afterUpdate = 0; // afterUpdate() calls since the previous checkpoint (they start the staging
                            // pool's allocation in the background)
    double staging = 0; // in the request: getting the staging pool (waiting for the background one)
    double request = 0; // the rest of the request: placing the entries, posting the copies
    double snapshotWait = 0; // beforeUpdate() calls until the next checkpoint: waiting for the copy
    double snapshot = 0; // the copy itself (overlapping the compute; not a stall)
    double total() const { return afterUpdate + staging + request + snapshotWait; }
};

struct LoopResult {
    double seconds = 0;
    std::vector<double> stalls; // per checkpoint
    std::vector<StallPhases> phases; // baton only, per checkpoint
    std::uint64_t dropped = 0;
    double policyOverheadPercent = 0; // baton only: the adaptive policy's own measure
};

void syncWrite(const fs::path& file, const std::vector<std::byte>& state, bool withFsync)
{
    io::Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    for (std::size_t at = 0; at < state.size();) {
        ssize_t n = ::write(fd.get(), state.data() + at, std::min<std::size_t>(64 << 20, state.size() - at));
        if (n <= 0)
            io::throwErrno("write " + file.string());
        at += static_cast<std::size_t>(n);
    }
    if (withFsync && ::fsync(fd.get()) != 0)
        io::throwErrno("fsync " + file.string());
}

// The loop of a training script that uses the API as documented: beforeUpdate() before and
// afterUpdate() after every optimizer step, a checkpoint requested every k iterations.
LoopResult trainingLoop(Mode mode, const fs::path& dir, std::vector<std::byte>& state, int iterations, int k)
{
    std::optional<Checkpointer> ckpt;
    if (mode == Mode::Baton) {
        Options options;
        options.chainDir = dir / "loop";
        options.keep = 2;
        ckpt.emplace(options);
        ckpt->registerRegion("weights", state.data(), state.size());
    }
    // The policy's measure of the same loop, at a fixed k (minimum = maximum = k).
    AdaptiveOptions fixed;
    fixed.maxInterval = static_cast<std::uint64_t>(k);
    AdaptiveInterval policy(static_cast<std::uint64_t>(k), 0.1, fixed, static_cast<std::uint64_t>(k));

    LoopResult result;
    double pendingAfterUpdate = 0;
    auto start = Clock::now();
    for (int it = 1; it <= iterations; ++it) {
        auto iterationStart = Clock::now();
        bool inFlight = ckpt && ckpt->inFlight();
        deviceStep();
        if (ckpt) {
            auto t = Clock::now();
            ckpt->beforeUpdate();
            if (!result.phases.empty()) {
                auto& last = result.phases.back();
                last.snapshotWait += since(t);
                last.snapshot = ckpt->lastCheckpoint().snapshotSeconds;
            }
        }
        // The optimizer step: rewrites one byte of every page.
        for (std::size_t i = 0; i < state.size(); i += 4096)
            state[i] = static_cast<std::byte>(it);
        if (ckpt) {
            auto t = Clock::now();
            ckpt->afterUpdate(static_cast<std::uint64_t>(it));
            pendingAfterUpdate += since(t);
        }
        // No checkpoint in the last iteration: its snapshot would have no next step to overlap.
        if (it % k == 0 && it < iterations) {
            auto t = Clock::now();
            if (ckpt) {
                StallPhases phases;
                phases.afterUpdate = std::exchange(pendingAfterUpdate, 0.0);
                if (ckpt->requestCheckpoint(static_cast<std::uint64_t>(it))) {
                    double requestSeconds = since(t);
                    phases.staging = ckpt->lastCheckpoint().stagingSeconds;
                    phases.request = std::max(0.0, requestSeconds - phases.staging);
                    result.phases.push_back(phases);
                    policy.checkpointStarted();
                }
            } else if (mode != Mode::None) {
                syncWrite(dir / "sync.bin", state, mode == Mode::SyncWriteFsync);
                result.stalls.push_back(since(t));
            }
        }
        inFlight = inFlight || (ckpt && ckpt->inFlight());
        policy.recordIteration(since(iterationStart), inFlight);
    }
    result.seconds = since(start);
    if (ckpt) {
        ckpt->wait();
        result.dropped = ckpt->counters().droppedRequests;
        for (const auto& p : result.phases)
            result.stalls.push_back(p.total());
        result.policyOverheadPercent = policy.measuredOverheadPercent();
    }
    std::error_code ec;
    fs::remove_all(dir / "loop", ec);
    fs::remove(dir / "sync.bin", ec);
    return result;
}

double mean(const std::vector<double>& values)
{
    double sum = 0;
    for (double v : values)
        sum += v;
    return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// What the runs of the training loop measured, by mode and for baton's checkpoints.
struct TrainingRuns {
    struct PerMode {
        Distribution loopSeconds, stallPerCheckpoint, overhead;
    };
    std::map<Mode, PerMode> modes;
    Distribution stallRatio, stallRatioNoFsync, policyOverhead, firstStall, steadyStall;
    std::vector<StallPhases> firstPhases, steadyPhases;
    std::uint64_t dropped = 0;
};

TrainingRuns runTrainingLoops(const fs::path& root, std::size_t size, int iterations, int k, int runs)
{
    std::vector<std::byte> state(size, std::byte { 1 });
    TrainingRuns t;
    for (int r = 0; r < runs; ++r) {
        // Each run starts with another mode, so that no mode always follows the same one.
        std::map<Mode, LoopResult> results;
        for (std::size_t m = 0; m < std::size(kModes); ++m) {
            Mode mode = kModes[(m + static_cast<std::size_t>(r)) % std::size(kModes)];
            results[mode] = trainingLoop(mode, root, state, iterations, k);
        }
        const double none = results[Mode::None].seconds;
        for (auto& [mode, result] : results) {
            t.modes[mode].loopSeconds.add(result.seconds);
            t.modes[mode].overhead.add((result.seconds - none) / none * 100.0);
            if (mode != Mode::None)
                t.modes[mode].stallPerCheckpoint.add(mean(result.stalls));
        }
        const auto& baton = results[Mode::Baton];
        t.stallRatio.add(mean(baton.stalls) / mean(results[Mode::SyncWriteFsync].stalls));
        t.stallRatioNoFsync.add(mean(baton.stalls) / mean(results[Mode::SyncWrite].stalls));
        t.policyOverhead.add(baton.policyOverheadPercent);
        t.dropped += baton.dropped;
        for (std::size_t i = 0; i < baton.phases.size(); ++i) {
            (i == 0 ? t.firstPhases : t.steadyPhases).push_back(baton.phases[i]);
            (i == 0 ? t.firstStall : t.steadyStall).add(baton.phases[i].total());
        }
    }
    return t;
}

void printStallPhases(const TrainingRuns& t)
{
    auto phaseRow = [&](const char* what, double StallPhases::*field) {
        Distribution first, steady;
        for (const auto& p : t.firstPhases)
            first.add(p.*field);
        for (const auto& p : t.steadyPhases)
            steady.add(p.*field);
        std::printf(
            "| %-46s | %-26s | %-26s |\n", what, first.text(3, 1000).c_str(), steady.text(3, 1000).c_str());
    };
    std::printf("\nbaton's stall by phase, ms, median (min-max)\n");
    std::printf("| %-46s | %-26s | %-26s |\n", "phase", "first checkpoint", "later checkpoints");
    std::printf("|%s|%s|%s|\n", std::string(48, '-').c_str(), std::string(28, '-').c_str(),
        std::string(28, '-').c_str());
    phaseRow("afterUpdate() (starts the staging allocation)", &StallPhases::afterUpdate);
    phaseRow("request: staging pool", &StallPhases::staging);
    phaseRow("request: entries placed, copies posted", &StallPhases::request);
    phaseRow("beforeUpdate(): waiting for the snapshot copy", &StallPhases::snapshotWait);
    phaseRow("(the snapshot copy, overlapping the compute)", &StallPhases::snapshot);
}

void trainingTable(const fs::path& root, std::size_t size, int iterations, int k, int runs)
{
    TrainingRuns t = runTrainingLoops(root, size, iterations, k, runs);
    std::printf(
        "\ntraining loop, %zu MiB state, 100 ms device step per iteration (the thread spins), checkpoint "
        "every %d iterations, %d iterations; median (min-max) of %d runs, modes alternating\n",
        size >> 20, k, iterations, runs);
    std::printf("| %-22s | %-22s | %-24s | %-24s |\n", "mode", "loop s", "stall/ckpt ms", "overhead %");
    std::printf("|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(24, '-').c_str(),
        std::string(26, '-').c_str(), std::string(26, '-').c_str());
    for (Mode mode : kModes) {
        const auto& m = t.modes[mode];
        std::printf("| %-22s | %-22s | %-24s | %-24s |\n", modeName(mode), m.loopSeconds.text(2).c_str(),
            mode == Mode::None ? "-" : m.stallPerCheckpoint.text(1, 1000).c_str(),
            mode == Mode::None ? "-" : m.overhead.text(2).c_str());
    }
    const auto& none = t.modes[Mode::None].loopSeconds;
    std::printf("the none loop's own spread: %.2f%% of its median (the noise any overhead figure carries)\n",
        (none.max() - none.min()) / none.median() * 100.0);
    std::printf("baton stall / sync+fsync stall = %s (target <= 0.1: %s at the median)\n",
        t.stallRatio.text(4).c_str(), t.stallRatio.median() <= 0.1 ? "holds" : "missed");
    std::printf("baton stall / sync (no fsync) stall = %s\n", t.stallRatioNoFsync.text(4).c_str());
    std::printf("baton overhead at k = %d = %s%% (target <= 5%%: %s at the median); the policy's own measure "
                "of the same loops %s%%\n",
        k, t.modes[Mode::Baton].overhead.text(2).c_str(),
        t.modes[Mode::Baton].overhead.median() <= 5 ? "holds" : "missed", t.policyOverhead.text(2).c_str());
    std::printf("baton stall, first checkpoint %s ms, later ones %s ms: first / later = %.2f (target <= 2)\n",
        t.firstStall.text(2, 1000).c_str(), t.steadyStall.text(2, 1000).c_str(),
        t.steadyStall.median() > 0 ? t.firstStall.median() / t.steadyStall.median() : 0.0);
    if (t.dropped > 0)
        std::printf("baton dropped %llu checkpoint requests (the previous one still in flight)\n",
            static_cast<unsigned long long>(t.dropped));
    printStallPhases(t);
    std::fflush(stdout);
}

std::vector<std::size_t> parseList(const std::string& text)
{
    std::vector<std::size_t> values;
    std::size_t at = 0;
    while (at < text.size()) {
        auto comma = text.find(',', at);
        values.push_back(std::stoul(text.substr(at, comma - at)));
        if (comma == std::string::npos)
            break;
        at = comma + 1;
    }
    return values;
}

} // namespace

int main(int argc, char** argv)
{
    fs::path dir = fs::temp_directory_path();
    std::size_t sizeMib = 512;
    std::vector<std::size_t> loopMib = { 256 };
    int runs = 5;
    int iterations = 50;
    try {
        for (int i = 1; i < argc; ++i) {
            std::string a = argv[i];
            auto value = [&]() -> std::string {
                if (i + 1 >= argc)
                    throw std::invalid_argument(a + " needs a value");
                return argv[++i];
            };
            if (a == "--dir")
                dir = value();
            else if (a == "--size-mib")
                sizeMib = std::stoul(value());
            else if (a == "--loop-mib")
                loopMib = parseList(value());
            else if (a == "--large")
                loopMib.push_back(2048);
            else if (a == "--runs")
                runs = std::stoi(value());
            else if (a == "--iterations")
                iterations = std::stoi(value());
            else
                throw std::invalid_argument("unknown option " + a);
        }
        if (runs < 1 || iterations < 20 || sizeMib < 1)
            throw std::invalid_argument("--runs must be >= 1, --iterations >= 20, --size-mib >= 1");
    } catch (const std::exception& e) {
        std::fprintf(stderr,
            "ckpt_bench: %s\nusage: ckpt_bench [--dir DIR] [--size-mib N] [--loop-mib N,...] [--large] "
            "[--runs N] [--iterations N]\n",
            e.what());
        return 2;
    }
    fs::path root = dir / ("baton-ckpt-bench-" + std::to_string(::getpid()));
    fs::create_directories(root);
    try {
        std::printf("baton checkpointer benchmark: files in %s, %d runs, %u usable cores, %u copy threads\n",
            root.c_str(), runs, usableCpuCount(), defaultCopyThreads());
        printBandwidth(sizeMib, runs, bandwidth(root, sizeMib << 20, runs));
        for (auto mib : loopMib)
            if (mib > 0)
                trainingTable(root, mib << 20, iterations, 10, runs);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ckpt_bench: %s\n", e.what());
        fs::remove_all(root);
        return 1;
    }
    fs::remove_all(root);
    return 0;
}
