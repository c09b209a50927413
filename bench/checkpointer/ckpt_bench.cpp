// Checkpointer benchmark: snapshot, persist and restore bandwidth against their physical baselines
// (multi-threaded memcpy, dd-style write + fsync, sequential read), and the training stall of a
// synthetic loop for baton, a synchronous write of the state, and no checkpointing.
//
//   ckpt_bench [--dir DIR] [--size-mib N] [--loop-mib N[,N...]] [--large] [--repeat N]
//
// --large adds the 2 GiB training loop (slow on small disks); --loop-mib 0 skips the loops. Reads are
// measured cold: the page cache of every file read is dropped with posix_fadvise(DONTNEED) first, for baton
// and baseline alike.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/manifest.hpp"
#include "io.hpp"
#include "../support/page_cache.hpp"

namespace fs = std::filesystem;
using namespace baton::ckpt;
using Clock = std::chrono::steady_clock;
using baton::bench::dropCache;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double since(Clock::time_point start)
{
    return std::chrono::duration<double>(Clock::now() - start).count();
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

struct Row {
    std::string what;
    double baton;
    double baseline;
    std::string unit;
    std::string target;
    bool higherIsBetter;
};

void printTable(const std::string& title, const std::vector<Row>& rows, const std::string& batonName,
    const std::string& baselineName)
{
    std::printf("\n%s\n", title.c_str());
    std::printf("| %-44s | %12s | %12s | %7s | %-14s |\n", "figure", batonName.c_str(), baselineName.c_str(),
        "ratio", "target");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(14, '-').c_str(),
        std::string(14, '-').c_str(), std::string(9, '-').c_str(), std::string(16, '-').c_str());
    for (const auto& r : rows) {
        double ratio = r.baseline > 0 ? r.baton / r.baseline : 0;
        std::printf("| %-44s | %8.3f %-3s | %8.3f %-3s | %6.3fx | %-14s |\n", r.what.c_str(), r.baton,
            r.unit.c_str(), r.baseline, r.unit.c_str(), ratio, r.target.c_str());
    }
    std::fflush(stdout);
}

// ---- bandwidth: snapshot, persist, restore --------------------------------------------------------

std::vector<Row> bandwidth(const fs::path& root, std::size_t size, int repeat)
{
    fs::path chain = root / "bandwidth";
    Options options;
    options.chainDir = chain;
    options.keep = 1;
    options.stagingBytes = size;
    Checkpointer ckpt(options);
    unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);

    std::vector<std::byte> state(size);
    for (std::size_t i = 0; i < size; i += 8)
        std::memcpy(&state[i], &i, std::min<std::size_t>(8, size - i));
    ckpt.registerRegion("weights", state.data(), size);

    io::AlignedBuffer target(size);
    double snapBaton = 1e30, snapMemcpy = 1e30, persistBaton = 1e30, persistDd = 1e30, restoreBaton = 1e30,
           restoreDd = 1e30;
    std::uint64_t iteration = 0;
    // Snapshots are short and the most sensitive to other load: measure more pairs, interleaved.
    for (int r = 0; r < 2 * repeat; ++r) {
        auto start = Clock::now();
        parallelMemcpy(target.data(), state.data(), size, threads);
        snapMemcpy = std::min(snapMemcpy, since(start));
        if (!ckpt.requestCheckpoint(++iteration))
            throw Error("checkpoint did not start: " + ckpt.lastError());
        ckpt.beforeUpdate();
        snapBaton = std::min(snapBaton, ckpt.lastCheckpoint().snapshotSeconds);
        if (!ckpt.wait())
            throw Error("checkpoint failed: " + ckpt.lastError());
    }
    for (int r = 0; r < repeat; ++r) {
        if (!ckpt.checkpointNow(++iteration))
            throw Error("checkpoint failed: " + ckpt.lastError());
        persistBaton = std::min(persistBaton, ckpt.lastCheckpoint().persistSeconds);

        persistDd = std::min(persistDd, ddWrite(root / "dd.bin", state.data(), size));

        fs::path data = chain / checkpointDirName(iteration) / kDataFileName;
        dropCache(data);
        auto start = Clock::now();
        auto restored = ckpt.restore();
        restoreBaton = std::min(restoreBaton, since(start));
        if (!restored.restored)
            throw Error("restore found nothing");
        restoreDd = std::min(restoreDd, ddRead(root / "dd.bin", target.data(), size));
        fs::remove(root / "dd.bin");
    }
    double mib = static_cast<double>(size) / kMiB;
    auto bw = [&](double s) { return mib / s / 1024.0; };
    return {
        { "snapshot vs " + std::to_string(threads) + "-thread memcpy", bw(snapBaton), bw(snapMemcpy), "GB/s",
            ">= 0.85x", true },
        { "persist vs write+fsync (dd conv=fsync)", bw(persistBaton), bw(persistDd), "GB/s", ">= 0.9x",
            true },
        { "restore (read+verify+copy) vs cold read", bw(restoreBaton), bw(restoreDd), "GB/s", ">= 0.9x",
            true },
    };
}

// ---- training loop ---------------------------------------------------------------------------------

// Stands in for the GPU: each iteration's forward/backward takes 100 ms on another thread.
class ComputeThread {
public:
    ComputeThread()
        : thread_([this] { run(); })
    { }
    ~ComputeThread()
    {
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    void iterate()
    {
        std::unique_lock lock(mutex_);
        pending_ = true;
        cv_.notify_all();
        cv_.wait(lock, [this] { return !pending_; });
    }

private:
    void run()
    {
        std::unique_lock lock(mutex_);
        for (;;) {
            cv_.wait(lock, [this] { return stop_ || pending_; });
            if (stop_)
                return;
            lock.unlock();
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            lock.lock();
            pending_ = false;
            cv_.notify_all();
        }
    }
    std::mutex mutex_;
    std::condition_variable cv_;
    bool pending_ = false;
    bool stop_ = false;
    std::thread thread_;
};

enum class Mode { None, Baton, SyncWrite, SyncWriteFsync };

struct LoopResult {
    double seconds = 0;
    double stallPerCheckpoint = 0;
    int checkpoints = 0;
    std::uint64_t dropped = 0;
};

LoopResult trainingLoop(Mode mode, const fs::path& dir, std::vector<std::byte>& state, int iterations, int k)
{
    std::optional<Checkpointer> ckpt;
    if (mode == Mode::Baton) {
        Options options;
        options.chainDir = dir / "loop";
        options.keep = 2;
        options.stagingBytes = state.size();
        ckpt.emplace(options);
        ckpt->registerRegion("weights", state.data(), state.size());
    }
    ComputeThread gpu;
    LoopResult result;
    double stall = 0;
    auto start = Clock::now();
    for (int it = 1; it <= iterations; ++it) {
        gpu.iterate();
        auto t = Clock::now();
        if (ckpt)
            ckpt->beforeUpdate();
        stall += since(t);
        // The optimizer step: rewrites one byte of every page.
        for (std::size_t i = 0; i < state.size(); i += 4096)
            state[i] = static_cast<std::byte>(it);
        if (it % k != 0)
            continue;
        ++result.checkpoints;
        t = Clock::now();
        if (ckpt) {
            ckpt->afterUpdate(static_cast<std::uint64_t>(it));
            ckpt->requestCheckpoint(static_cast<std::uint64_t>(it));
        } else if (mode == Mode::SyncWrite || mode == Mode::SyncWriteFsync) {
            fs::path file = dir / "sync.bin";
            io::Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
            for (std::size_t at = 0; at < state.size();) {
                ssize_t n = ::write(
                    fd.get(), state.data() + at, std::min<std::size_t>(64 << 20, state.size() - at));
                if (n <= 0)
                    io::throwErrno("write " + file.string());
                at += static_cast<std::size_t>(n);
            }
            if (mode == Mode::SyncWriteFsync)
                ::fsync(fd.get());
        }
        stall += since(t);
    }
    result.seconds = since(start);
    if (ckpt) {
        ckpt->wait();
        // Dropped requests cost no stall: count only the checkpoints that ran.
        result.dropped = ckpt->counters().droppedRequests;
        result.checkpoints = static_cast<int>(ckpt->counters().requested);
    }
    result.stallPerCheckpoint = result.checkpoints > 0 ? stall / result.checkpoints : 0;
    std::error_code ec;
    fs::remove_all(dir / "loop", ec);
    fs::remove(dir / "sync.bin", ec);
    return result;
}

void trainingTable(const fs::path& root, std::size_t size, int iterations, int k)
{
    std::vector<std::byte> state(size, std::byte { 1 });
    auto none = trainingLoop(Mode::None, root, state, iterations, k);
    auto baton = trainingLoop(Mode::Baton, root, state, iterations, k);
    auto sync = trainingLoop(Mode::SyncWrite, root, state, iterations, k);
    auto syncFsync = trainingLoop(Mode::SyncWriteFsync, root, state, iterations, k);
    auto overhead = [&](const LoopResult& r) { return (r.seconds - none.seconds) / none.seconds * 100.0; };
    std::string mib = std::to_string(size >> 20) + " MiB";

    std::printf("\ntraining loop, %s state, 100 ms compute/iteration on another thread, checkpoint every %d "
                "iterations, %d iterations\n",
        mib.c_str(), k, iterations);
    std::printf(
        "| %-22s | %10s | %16s | %16s | %8s |\n", "mode", "loop s", "stall/ckpt (ms)", "overhead", "dropped");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(12, '-').c_str(),
        std::string(18, '-').c_str(), std::string(18, '-').c_str(), std::string(10, '-').c_str());
    auto row = [&](const char* name, const LoopResult& r) {
        std::printf("| %-22s | %10.2f | %16.1f | %15.2f%% | %8llu |\n", name, r.seconds,
            r.stallPerCheckpoint * 1000, overhead(r), static_cast<unsigned long long>(r.dropped));
    };
    row("none", none);
    row("baton", baton);
    row("sync write (no fsync)", sync);
    row("sync write + fsync", syncFsync);
    std::printf(
        "baton stall / sync+fsync stall = %.4f (target <= 0.1); baton overhead %.2f%% (target <= 5%%)\n",
        baton.stallPerCheckpoint / syncFsync.stallPerCheckpoint, overhead(baton));
    std::printf(
        "baton stall / sync (no fsync) stall = %.4f\n", baton.stallPerCheckpoint / sync.stallPerCheckpoint);
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
    int repeat = 3;
    int iterations = 30;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "ckpt_bench: %s needs a value\n", a.c_str());
                std::exit(2);
            }
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
        else if (a == "--repeat")
            repeat = std::stoi(value());
        else if (a == "--iterations")
            iterations = std::stoi(value());
        else {
            std::fprintf(stderr,
                "usage: ckpt_bench [--dir DIR] [--size-mib N] [--loop-mib N,...] [--large] "
                "[--repeat N] [--iterations N]\n");
            return 2;
        }
    }
    fs::path root = dir / ("baton-ckpt-bench-" + std::to_string(::getpid()));
    fs::create_directories(root);
    try {
        std::printf("baton checkpointer benchmark: files in %s, best of %d\n", root.c_str(), repeat);
        auto rows = bandwidth(root, sizeMib << 20, repeat);
        printTable("bandwidth, " + std::to_string(sizeMib) + " MiB", rows, "baton", "baseline");
        for (auto mib : loopMib)
            if (mib > 0)
                trainingTable(root, mib << 20, iterations, 10);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ckpt_bench: %s\n", e.what());
        fs::remove_all(root);
        return 1;
    }
    fs::remove_all(root);
    return 0;
}
