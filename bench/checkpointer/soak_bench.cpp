// Memory over a long run: users of other asynchronous checkpointers report resident memory that grows at
// every save (staging buffers allocated anew, buffers freed on another thread than the one that made
// them). This runs many checkpoints of one training state, on one level and on two (the drain's thread
// copies every checkpoint once more), and prints the process's resident set, the heap the allocator holds
// in use, and the pinned (page-locked) bytes after the warm-up, half way and at the end. The target: the
// end and the middle within 2 % of the start, on both levels. The host path pins nothing (no device); a
// CUDA build with a device prints the pinned staging as well.
//
//   soak_bench [--checkpoints N] [--mib N] [--dir DIR]   (DIR: where the chain directories go; default
//                                                         /dev/shm where it exists, so that the disk is
//                                                         not what is measured)
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "baton/ckpt/checkpointer.hpp"

namespace fs = std::filesystem;
using namespace baton::ckpt;

namespace {

struct Settings {
    int checkpoints = 600;
    std::size_t bytes = std::size_t(16) << 20;
    fs::path dir;
};

// What the process holds, as the kernel and the allocator count it.
struct Memory {
    double rssMiB = 0; // resident set (VmRSS)
    double lockedMiB = 0; // page-locked (VmLck): pinned host memory registered or allocated as such
    double heapMiB = 0; // bytes the allocator has handed out and not had back (mallinfo2)
};

double statusField(const std::string& text, const char* key)
{
    const auto at = text.find(key);
    return at == std::string::npos ? 0 : std::strtod(text.c_str() + at + std::strlen(key), nullptr) / 1024;
}

Memory measure()
{
    std::ifstream in("/proc/self/status");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    Memory memory;
    memory.rssMiB = statusField(text, "VmRSS:");
    memory.lockedMiB = statusField(text, "VmLck:");
    memory.heapMiB = static_cast<double>(mallinfo2().uordblks) / (1 << 20);
    return memory;
}

struct Run {
    Memory start, middle, end;
    Counters counters;
    double pinnedMiB = 0;
    double seconds = 0;
};

// `settings.checkpoints` checkpoints of a state that changes between them, each waited for until it is
// durable (in the chain directory, on two levels), with retention keeping 2: the files come and go.
Run soak(const Settings& settings, bool twoLevels)
{
    const fs::path root = settings.dir / (twoLevels ? "soak-two" : "soak-one");
    fs::remove_all(root);
    Options options;
    options.chainDir = root / "chain";
    if (twoLevels)
        options.localDir = root / "local";
    options.keep = 2;
    options.log = [](std::string_view) {};
    std::vector<std::byte> state(settings.bytes);
    std::vector<std::byte> small(4096);
    Run run;
    const auto began = std::chrono::steady_clock::now();
    {
        Checkpointer checkpointer(options);
        checkpointer.registerRegion("weights", state.data(), state.size());
        const int warmUp = 10; // the staging buffer and the thread pools are made by the first ones
        for (int i = 1; i <= settings.checkpoints + warmUp; ++i) {
            std::memset(state.data() + (static_cast<std::size_t>(i) * 4096) % state.size(), i & 0xff, 4096);
            std::memset(small.data(), i & 0xff, small.size());
            checkpointer.setBlob("optimizer_step", std::span<const std::byte>(small));
            if (!checkpointer.checkpointNow(static_cast<std::uint64_t>(i)) || !checkpointer.waitDurable()) {
                std::fprintf(stderr, "soak_bench: checkpoint %d failed: %s\n", i, checkpointer.lastError().c_str());
                std::exit(1);
            }
            if (i == warmUp)
                run.start = measure();
            else if (i == warmUp + settings.checkpoints / 2)
                run.middle = measure();
        }
        run.end = measure();
        run.counters = checkpointer.counters();
        run.pinnedMiB = checkpointer.deviceAvailable() ? run.end.lockedMiB : 0;
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    fs::remove_all(root);
    return run;
}

double percent(double value, double base)
{
    return base > 0 ? 100.0 * (value - base) / base : 0;
}

bool report(const char* name, const Run& run)
{
    std::printf("%-10s %6llu checkpoints in %6.1f s\n", name, static_cast<unsigned long long>(run.counters.committed),
        run.seconds);
    std::printf("  %-22s %10s %10s %10s %10s %10s\n", "", "start", "middle", "end", "middle %", "end %");
    const auto row = [](const char* what, double start, double middle, double end) {
        std::printf("  %-22s %10.2f %10.2f %10.2f %+10.2f %+10.2f\n", what, start, middle, end, percent(middle, start),
            percent(end, start));
    };
    row("resident MiB", run.start.rssMiB, run.middle.rssMiB, run.end.rssMiB);
    row("heap in use MiB", run.start.heapMiB, run.middle.heapMiB, run.end.heapMiB);
    row("page-locked MiB", run.start.lockedMiB, run.middle.lockedMiB, run.end.lockedMiB);
    std::printf("  pinned staging MiB     %10.2f (%s)\n", run.pinnedMiB,
        run.pinnedMiB > 0 ? "device path" : "host path: nothing is pinned");
    const bool flat = std::abs(percent(run.middle.rssMiB, run.start.rssMiB)) <= 2
        && std::abs(percent(run.end.rssMiB, run.start.rssMiB)) <= 2
        && std::abs(percent(run.end.lockedMiB, run.start.lockedMiB)) <= 2;
    std::printf("  resident and pinned memory flat within 2 %%: %s\n", flat ? "yes" : "NO");
    return flat;
}

} // namespace

int main(int argc, char** argv)
{
    Settings settings;
    settings.dir = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
        if (arg == "--checkpoints" && value)
            settings.checkpoints = std::atoi(argv[++i]);
        else if (arg == "--mib" && value)
            settings.bytes = static_cast<std::size_t>(std::atoll(argv[++i])) << 20;
        else if (arg == "--dir" && value)
            settings.dir = argv[++i];
        else {
            std::fprintf(stderr, "usage: soak_bench [--checkpoints N] [--mib N] [--dir DIR]\n");
            return 2;
        }
    }
    if (settings.checkpoints < 2 || settings.bytes == 0) {
        std::fprintf(stderr, "soak_bench: --checkpoints must be at least 2 and --mib at least 1\n");
        return 2;
    }
    settings.dir /= "baton-soak-" + std::to_string(::getpid());
    fs::create_directories(settings.dir);
    std::printf("soak: %d checkpoints of %zu MiB after 10 of warm-up, in %s\n", settings.checkpoints,
        settings.bytes >> 20, settings.dir.c_str());
    const bool oneFlat = report("one level", soak(settings, false));
    const bool twoFlat = report("two levels", soak(settings, true));
    fs::remove_all(settings.dir);
    std::printf("soak: %s\n", oneFlat && twoFlat ? "flat on both levels" : "memory grew");
    return 0;
}
