// The checkpointer's GPU figures, each against its baseline measured in the same run:
//   - the snapshot's device-to-host copy against the copy engine's peak (cudaMemcpyAsync from device
//     memory into pinned host memory);
//   - the restore (read with direct I/O, verified, copied to the device) against a cold sequential read
//     of the same file into pinned memory plus one host-to-device copy;
//   - the cost per checkpoint of a training loop whose state is in device memory: baton with pinned
//     host snapshots, baton with device-side snapshots, and a synchronous copy to host + write + fsync
//     (what torch.save of CUDA tensors does), all against the same loop without checkpoints.
// Figures are medians with min-max over --repeat runs, baton and baseline alternating.
//
//   gpu_bench [--dir DIR] [--size-mib N] [--repeat N] [--iterations N] [--every K] [--compute-ms N]
//
// Exits 77 (skipped) where no CUDA device is usable.
#include <fcntl.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/manifest.hpp"
#include "bench/support/distribution.hpp"
#include "bench/support/page_cache.hpp"
#include "checkpointer/src/io.hpp"

cudaError_t launchSpin(cudaStream_t stream, long long cycles);

namespace fs = std::filesystem;
using namespace baton::ckpt;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point start)
{
    return baton::bench::secondsSince(start);
}

void check(cudaError_t status, const char* what)
{
    if (status != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

struct Spread {
    double median = 0, min = 0, max = 0;
};

Spread spread(std::vector<double> values)
{
    if (values.empty())
        return {};
    std::sort(values.begin(), values.end());
    std::size_t n = values.size();
    double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
    return { median, values.front(), values.back() };
}

std::string show(const Spread& s, const char* format)
{
    char buffer[96];
    std::string f = std::string(format) + " (" + format + "-" + format + ")";
    std::snprintf(buffer, sizeof buffer, f.c_str(), s.median, s.min, s.max);
    return buffer;
}

// Device memory, a pinned host buffer and a stream, freed on every path.
struct DeviceState {
    explicit DeviceState(std::size_t bytes)
        : size(bytes)
    {
        check(cudaMalloc(&device, size), "cudaMalloc");
        check(cudaHostAlloc(&pinned, size, cudaHostAllocDefault), "cudaHostAlloc");
        check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaMemset(device, 0x5a, size), "cudaMemset");
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    ~DeviceState()
    {
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
        cudaFreeHost(pinned);
        cudaFree(device);
    }
    DeviceState(const DeviceState&) = delete;
    DeviceState& operator=(const DeviceState&) = delete;

    std::size_t size;
    void* device = nullptr;
    void* pinned = nullptr;
    cudaStream_t stream = nullptr;
};

// The restore's baseline: the checkpoint's data file read cold into pinned memory, then copied to the
// device.
double readAndCopySeconds(DeviceState& s, const fs::path& file)
{
    baton::bench::dropCache(file);
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        io::throwErrno("open " + file.string());
    auto start = Clock::now();
    auto* into = static_cast<std::byte*>(s.pinned);
    for (std::size_t at = 0; at < s.size;) {
        ssize_t n = ::read(fd, into + at, std::min<std::size_t>(8 << 20, s.size - at));
        if (n <= 0) {
            ::close(fd);
            throw std::runtime_error("short read of " + file.string());
        }
        at += static_cast<std::size_t>(n);
    }
    ::close(fd);
    check(cudaMemcpy(s.device, s.pinned, s.size, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    return since(start);
}

// One copy of `size` bytes between device and pinned host memory, timed with events: the copy engine's
// peak for this direction on this machine.
double rawCopySeconds(DeviceState& s, cudaMemcpyKind kind)
{
    cudaEvent_t begin, end;
    check(cudaEventCreate(&begin), "cudaEventCreate");
    check(cudaEventCreate(&end), "cudaEventCreate");
    check(cudaEventRecord(begin, s.stream), "cudaEventRecord");
    if (kind == cudaMemcpyDeviceToHost)
        check(cudaMemcpyAsync(s.pinned, s.device, s.size, kind, s.stream), "cudaMemcpyAsync D2H");
    else
        check(cudaMemcpyAsync(s.device, s.pinned, s.size, kind, s.stream), "cudaMemcpyAsync H2D");
    check(cudaEventRecord(end, s.stream), "cudaEventRecord");
    check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    return ms / 1e3;
}

void copyTable(const fs::path& root, std::size_t size, int repeat)
{
    DeviceState s(size);
    Options options;
    options.chainDir = root / "copies";
    options.keep = 1;
    options.stagingBytes = size;
    options.log = [](std::string_view) {};
    Checkpointer ckpt(options);
    if (!ckpt.deviceAvailable())
        throw std::runtime_error("the checkpointer found no usable device although the runtime did");
    ckpt.registerDeviceRegion("weights", s.device, size, 0, s.stream);

    std::vector<double> peakD2H, batonD2H, peakH2D, batonRestore, readAndCopy;
    const double gb = static_cast<double>(size) / 1e9;
    std::uint64_t iteration = 0;
    rawCopySeconds(s, cudaMemcpyDeviceToHost); // first use of the buffers is not a figure
    for (int r = 0; r < repeat; ++r) {
        peakD2H.push_back(gb / rawCopySeconds(s, cudaMemcpyDeviceToHost));
        if (!ckpt.checkpointNow(++iteration))
            throw std::runtime_error("checkpoint failed: " + ckpt.lastError());
        // For device regions the snapshot ends when the copy into pinned staging has finished.
        batonD2H.push_back(gb / ckpt.lastCheckpoint().snapshotSeconds);

        peakH2D.push_back(gb / rawCopySeconds(s, cudaMemcpyHostToDevice));
        fs::path data = options.chainDir / checkpointDirName(iteration) / kDataFileName;
        readAndCopy.push_back(gb / readAndCopySeconds(s, data));
        baton::bench::dropCache(data); // cold for baton too
        auto start = Clock::now();
        auto restored = ckpt.restore();
        double seconds = since(start);
        if (!restored.restored)
            throw std::runtime_error("restore found nothing");
        batonRestore.push_back(gb / seconds);
    }
    std::printf("\ncopies of a %zu MiB device region, GB/s, median (min-max) of %d\n", size >> 20, repeat);
    std::printf("| %-40s | %-24s | %-24s | %7s |\n", "figure", "baton", "baseline", "ratio");
    std::printf("|%s|%s|%s|%s|\n", std::string(42, '-').c_str(), std::string(26, '-').c_str(),
        std::string(26, '-').c_str(), std::string(9, '-').c_str());
    auto row = [](const char* what, const std::vector<double>& baton, const std::vector<double>& peak) {
        Spread b = spread(baton), p = spread(peak);
        std::printf("| %-40s | %-24s | %-24s | %6.3fx |\n", what, show(b, "%.1f").c_str(),
            show(p, "%.1f").c_str(), b.median / p.median);
    };
    row("snapshot D2H vs copy engine D2H peak", batonD2H, peakD2H);
    row("restore vs cold read + H2D copy", batonRestore, readAndCopy);
    Spread h2d = spread(peakH2D);
    std::printf("copy engine H2D peak: %s GB/s\n", show(h2d, "%.1f").c_str());
    std::fflush(stdout);
}

enum class Mode { None, PinnedHost, DeviceSide, SyncSave };

const char* modeName(Mode mode)
{
    switch (mode) {
    case Mode::None: return "none";
    case Mode::PinnedHost: return "baton, pinned host snapshot";
    case Mode::DeviceSide: return "baton, device-side snapshot";
    case Mode::SyncSave: return "copy to host + write + fsync";
    }
    return "?";
}

struct LoopResult {
    double seconds = 0; // the whole loop, GPU work included
    double hostStall = 0; // time the training thread spent in checkpoint calls
    int checkpoints = 0;
    std::uint64_t dropped = 0;
};

// A training loop on the GPU: each iteration spins for the compute time, then updates every byte of the
// state (a memset standing in for the optimizer step) and waits for the stream as a loss.item() would.
LoopResult trainingLoop(
    Mode mode, const fs::path& dir, DeviceState& s, int iterations, int every, long long spinCycles)
{
    std::optional<Checkpointer> ckpt;
    if (mode == Mode::PinnedHost || mode == Mode::DeviceSide) {
        Options options;
        options.chainDir = dir / "loop";
        options.keep = 2;
        options.stagingBytes = s.size;
        options.log = [](std::string_view) {};
        ckpt.emplace(options);
        ckpt->setDeviceSnapshot(mode == Mode::DeviceSide);
        ckpt->registerDeviceRegion("weights", s.device, s.size, 0, s.stream);
    }
    LoopResult result;
    auto start = Clock::now();
    for (int it = 1; it <= iterations; ++it) {
        check(launchSpin(s.stream, spinCycles), "spin kernel");
        auto t = Clock::now();
        if (ckpt)
            ckpt->beforeUpdate();
        result.hostStall += since(t);
        check(cudaMemsetAsync(s.device, it & 0xff, s.size, s.stream), "optimizer step");
        if (it % every == 0) {
            t = Clock::now();
            if (ckpt) {
                ckpt->afterUpdate(static_cast<std::uint64_t>(it));
                ckpt->requestCheckpoint(static_cast<std::uint64_t>(it));
            } else if (mode == Mode::SyncSave) {
                check(cudaMemcpyAsync(s.pinned, s.device, s.size, cudaMemcpyDeviceToHost, s.stream), "D2H");
                check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
                fs::path file = dir / "save.bin";
                io::Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
                const auto* bytes = static_cast<const std::byte*>(s.pinned);
                for (std::size_t at = 0; at < s.size;) {
                    ssize_t n = ::write(fd.get(), bytes + at, std::min<std::size_t>(64 << 20, s.size - at));
                    if (n <= 0)
                        io::throwErrno("write " + file.string());
                    at += static_cast<std::size_t>(n);
                }
                if (::fsync(fd.get()) != 0)
                    io::throwErrno("fsync " + file.string());
                ++result.checkpoints;
            }
            result.hostStall += since(t);
        }
        check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize");
    }
    result.seconds = since(start);
    if (ckpt) {
        if (!ckpt->wait())
            throw std::runtime_error("checkpoint failed: " + ckpt->lastError());
        result.checkpoints = static_cast<int>(ckpt->counters().requested);
        result.dropped = ckpt->counters().droppedRequests;
    }
    std::error_code ec;
    fs::remove_all(dir / "loop", ec);
    fs::remove(dir / "save.bin", ec);
    return result;
}

void loopTable(const fs::path& root, std::size_t size, int repeat, int iterations, int every, double computeMs)
{
    DeviceState s(size);
    int clockKhz = 0;
    check(cudaDeviceGetAttribute(&clockKhz, cudaDevAttrClockRate, 0), "cudaDeviceGetAttribute");
    const auto spinCycles = static_cast<long long>(computeMs * clockKhz);
    const Mode modes[] = { Mode::None, Mode::PinnedHost, Mode::DeviceSide, Mode::SyncSave };
    std::vector<double> perCheckpoint[4], hostStall[4], overhead[4];
    std::uint64_t dropped[4] = {};
    trainingLoop(Mode::None, root, s, every, every, spinCycles); // warm-up: clocks, kernel load
    for (int r = 0; r < repeat; ++r) {
        LoopResult results[4];
        for (int m = 0; m < 4; ++m)
            results[m] = trainingLoop(modes[m], root, s, iterations, every, spinCycles);
        for (int m = 1; m < 4; ++m) {
            const LoopResult& x = results[m];
            double extra = x.seconds - results[0].seconds;
            int n = std::max(1, x.checkpoints);
            perCheckpoint[m].push_back(extra / n * 1e3);
            hostStall[m].push_back(x.hostStall / n * 1e3);
            overhead[m].push_back(extra / results[0].seconds * 100);
            dropped[m] += x.dropped;
        }
    }
    std::printf("\ntraining loop on the GPU, %zu MiB state, %.0f ms compute/iteration, checkpoint every %d "
                "iterations, %d iterations; median (min-max) of %d\n",
        size >> 20, computeMs, every, iterations, repeat);
    std::printf("| %-30s | %-26s | %-26s | %-24s | %7s |\n", "mode", "cost/ckpt ms (loop time)",
        "host stall/ckpt ms", "overhead %", "dropped");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(32, '-').c_str(), std::string(28, '-').c_str(),
        std::string(28, '-').c_str(), std::string(26, '-').c_str(), std::string(9, '-').c_str());
    for (int m = 1; m < 4; ++m)
        std::printf("| %-30s | %-26s | %-26s | %-24s | %7llu |\n", modeName(modes[m]),
            show(spread(perCheckpoint[m]), "%.1f").c_str(), show(spread(hostStall[m]), "%.2f").c_str(),
            show(spread(overhead[m]), "%.2f").c_str(), static_cast<unsigned long long>(dropped[m]));
    double save = spread(perCheckpoint[3]).median;
    std::printf("cost per checkpoint / copy+write+fsync: pinned host %.4f, device-side %.4f (target <= 0.1)\n",
        spread(perCheckpoint[1]).median / save, spread(perCheckpoint[2]).median / save);
    std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv)
{
    fs::path dir = fs::temp_directory_path();
    std::size_t sizeMib = 1024;
    int repeat = 5, iterations = 40, every = 10;
    double computeMs = 100;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr,
                "usage: gpu_bench [--dir DIR] [--size-mib N] [--repeat N] [--iterations N] [--every K] "
                "[--compute-ms N]\n");
            return 2;
        }
        std::string v = argv[++i];
        if (a == "--dir")
            dir = v;
        else if (a == "--size-mib")
            sizeMib = std::stoul(v);
        else if (a == "--repeat")
            repeat = std::max(1, std::stoi(v));
        else if (a == "--iterations")
            iterations = std::max(1, std::stoi(v));
        else if (a == "--every")
            every = std::max(1, std::stoi(v));
        else if (a == "--compute-ms")
            computeMs = std::stod(v);
        else {
            std::fprintf(stderr, "gpu_bench: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        std::printf("SKIP: no usable CUDA device (%s)\n",
            status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
        return 77;
    }
    cudaDeviceProp properties {};
    cudaGetDeviceProperties(&properties, 0);
    fs::path root = dir / ("baton-gpu-bench-" + std::to_string(::getpid()));
    fs::create_directories(root);
    try {
        std::printf("baton checkpointer GPU benchmark on %s: files in %s\n", properties.name, root.c_str());
        copyTable(root, sizeMib << 20, repeat);
        loopTable(root, sizeMib << 20, std::max(1, repeat / 2), iterations, every, computeMs);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_bench: %s\n", e.what());
        fs::remove_all(root);
        return 1;
    }
    fs::remove_all(root);
    return 0;
}
