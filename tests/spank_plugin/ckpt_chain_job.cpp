// A small training job for the chain test: restores from its chain (found through the BATON_*
// environment the plugin sets), trains with periodic checkpoints, and commits a final checkpoint
// BATON_DEADLINE_MARGIN seconds before BATON_DEADLINE. Then it keeps training until Slurm stops it at
// the limit, like a real job would. With --run-seconds=N it exits on its own after N seconds.
#include "baton/ckpt/checkpointer.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace {

std::uint64_t expectedWord(std::uint64_t iteration, std::size_t index)
{
    return iteration * 1000003u + index;
}

long long envNumber(const char* name)
{
    const char* value = std::getenv(name);
    if (value == nullptr) {
        std::fprintf(stderr, "%s is not set\n", name);
        std::exit(2);
    }
    return std::stoll(value);
}

} // namespace

int main(int argc, char** argv)
{
    long long runSeconds = -1;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--run-seconds=", 0) == 0) {
            runSeconds = std::stoll(arg.substr(14));
        }
    }
    const long long deadline = envNumber("BATON_DEADLINE");
    const long long margin = envNumber("BATON_DEADLINE_MARGIN");
    std::printf("restart count %s\n", std::getenv("BATON_RESTART_COUNT"));

    baton::ckpt::Checkpointer ckpt(baton::ckpt::Options::fromEnvironment());
    std::vector<std::uint64_t> weights(1 << 17); // 1 MiB
    ckpt.registerRegion("weights", weights.data(), weights.size() * sizeof weights[0]);
    const auto restored = ckpt.restore();
    std::uint64_t first = 0;
    if (restored.restored) {
        bool intact = true;
        for (std::size_t i = 0; i < weights.size(); ++i) {
            intact = intact && weights[i] == expectedWord(restored.iteration, i);
        }
        std::printf("restored iteration %llu %s\n", static_cast<unsigned long long>(restored.iteration),
            intact ? "verified" : "CORRUPT");
        first = restored.iteration + 1;
    } else {
        std::printf("fresh start\n");
    }
    std::fflush(stdout);

    const auto started = std::chrono::steady_clock::now();
    bool finalDone = false;
    for (std::uint64_t it = first;; ++it) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50)); // forward and backward pass
        ckpt.beforeUpdate();
        for (std::size_t i = 0; i < weights.size(); ++i) {
            weights[i] = expectedWord(it, i);
        }
        ckpt.afterUpdate(it);
        const long long now = std::time(nullptr);
        if (!finalDone && now >= deadline - margin) {
            const bool committed = ckpt.checkpointNow(it);
            std::printf("final checkpoint iteration %llu %s at %lld, deadline %lld\n",
                static_cast<unsigned long long>(it), committed ? "committed" : "FAILED",
                static_cast<long long>(std::time(nullptr)), deadline);
            std::fflush(stdout);
            finalDone = true;
        } else if (!finalDone && it % 40 == 0) {
            ckpt.requestCheckpoint(it);
        }
        if (runSeconds >= 0
            && std::chrono::steady_clock::now() - started >= std::chrono::seconds(runSeconds)) {
            ckpt.wait();
            std::printf("stopping at iteration %llu\n", static_cast<unsigned long long>(it));
            return 0;
        }
    }
}
