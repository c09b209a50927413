// Multi-rank persist bandwidth: 1, 2 and 4 ranks (processes, the file-system coordinator) checkpoint one
// replicated region (data-parallel state: every rank holds the same bytes, each byte is written once,
// split across the ranks) against the disk's own write bandwidth measured in the same run (one writer,
// O_DIRECT, fsync: what io::writeFileDurably does for a single process).
//
//     multirank_bench [--mib N] [--repeat R] [--dir PATH]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "checkpointer/src/io.hpp"

namespace fs = std::filesystem;
using namespace baton::ckpt;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

// The disk alone: the same bytes in one file, direct I/O, made durable. Best of `repeat`.
double diskSeconds(const fs::path& dir, std::size_t size, int repeat)
{
    io::AlignedBuffer buffer(io::roundUp(size, io::kDirectAlignment));
    std::memset(buffer.data(), 0x5a, buffer.size());
    double best = 1e30;
    for (int i = 0; i < repeat; ++i) {
        auto file = dir / "disk-baseline.bin";
        auto start = Clock::now();
        io::writeFileDurably(file, buffer.data(), size, true);
        best = std::min(best, seconds(Clock::now() - start));
        fs::remove(file);
    }
    return best;
}

// One rank: writes its result (best persist seconds, as seen by this rank) to `out`.
int rankMain(const fs::path& chain, int launch, int rank, int ranks, std::size_t size, int repeat, int out)
{
    try {
        Options options;
        options.chainDir = chain;
        options.keep = 1;
        options.log = [](std::string_view) {};
        auto coordinator
            = std::make_shared<FileCoordinator>(chain, "bench-" + std::to_string(launch), rank, ranks);
        options.coordinator = coordinator;
        Checkpointer ckpt(options);
        io::AlignedBuffer state(size);
        std::memset(state.data(), 0x33, size);
        ckpt.registerRegion("weights", state.data(), size);
        ckpt.setRegionLayout("weights", RegionLayout::replicated());
        double best = 1e30;
        for (int i = 0; i < repeat; ++i) {
            coordinator->barrier("start");
            auto start = Clock::now();
            if (!ckpt.checkpointNow(static_cast<std::uint64_t>(i + 1)))
                throw Error(ckpt.lastError());
            best = std::min(best, seconds(Clock::now() - start));
        }
        if (::write(out, &best, sizeof best) != sizeof best)
            return 1;
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        return 1;
    }
}

double ranksSeconds(const fs::path& root, int launch, int ranks, std::size_t size, int repeat)
{
    fs::path chain = root / ("ranks-" + std::to_string(ranks));
    fs::create_directories(chain);
    std::vector<pid_t> pids;
    std::vector<int> pipes;
    for (int r = 0; r < ranks; ++r) {
        int fds[2];
        if (::pipe(fds) != 0)
            throw Error("pipe failed");
        pid_t pid = ::fork();
        if (pid == 0) {
            ::close(fds[0]);
            ::_exit(rankMain(chain, launch, r, ranks, size, repeat, fds[1]));
        }
        ::close(fds[1]);
        pids.push_back(pid);
        pipes.push_back(fds[0]);
    }
    double slowest = 0;
    bool ok = true;
    for (int r = 0; r < ranks; ++r) {
        double value = 0;
        ok = ok && ::read(pipes[static_cast<std::size_t>(r)], &value, sizeof value) == sizeof value;
        ::close(pipes[static_cast<std::size_t>(r)]);
        slowest = std::max(slowest, value);
        int status = 0;
        ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    fs::remove_all(chain);
    if (!ok)
        throw Error(std::to_string(ranks) + " ranks failed");
    return slowest; // a checkpoint is done when its slowest rank knows it committed
}

} // namespace

int main(int argc, char** argv)
{
    std::size_t mib = 256;
    int repeat = 3;
    fs::path root = fs::temp_directory_path() / ("baton-multirank-bench-" + std::to_string(::getpid()));
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--mib" && i + 1 < argc)
            mib = std::stoul(argv[++i]);
        else if (arg == "--repeat" && i + 1 < argc)
            repeat = std::stoi(argv[++i]);
        else if (arg == "--dir" && i + 1 < argc)
            root = fs::path(argv[++i]) / ("baton-multirank-bench-" + std::to_string(::getpid()));
        else {
            std::fprintf(stderr, "usage: multirank_bench [--mib N] [--repeat R] [--dir PATH]\n");
            return 2;
        }
    }
    try {
        fs::create_directories(root);
        const std::size_t size = mib << 20;
        const double mibs = static_cast<double>(mib);
        std::printf("replicated state %zu MiB, best of %d, in %s (%u cores)\n", mib, repeat, root.c_str(),
            std::thread::hardware_concurrency());
        const double disk = diskSeconds(root, size, repeat);
        std::printf("%-28s %9.3f s %9.1f MiB/s\n", "disk (1 writer, O_DIRECT)", disk, mibs / disk);
        int launch = 0;
        for (int ranks : { 1, 2, 4 }) {
            double t = ranksSeconds(root, ++launch, ranks, size, repeat);
            std::printf("%-28s %9.3f s %9.1f MiB/s  %.2fx disk\n",
                (std::to_string(ranks) + " rank(s), persist").c_str(), t, mibs / t, disk / t);
        }
        fs::remove_all(root);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "multirank_bench: %s\n", e.what());
        fs::remove_all(root);
        return 1;
    }
    return 0;
}
