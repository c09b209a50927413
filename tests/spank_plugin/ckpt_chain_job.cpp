// A small training job for the chain test, configured only through the BATON_* environment the plugin
// sets: it restores from its chain (after the handover wait, BATON_HANDOVER_WAIT), trains with the
// policy's checkpoints, and exits once the policy's final checkpoint has committed: before
// BATON_DEADLINE - BATON_DEADLINE_MARGIN, or at the next iteration after SIGTERM (a handover). With
// --run-seconds=N it stops on its own after N seconds instead; with --total-iterations=N it declares the
// training done once iteration N - 1 is trained (a final checkpoint with training_done) and exits 0.
#include "baton/ckpt/session.hpp"

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

struct Arguments {
    long long runSeconds = -1;
    long long totalIterations = -1;
};

bool parseArguments(int argc, char** argv, Arguments& arguments)
{
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--run-seconds=", 0) == 0) {
            arguments.runSeconds = std::stoll(arg.substr(14));
        } else if (arg.rfind("--total-iterations=", 0) == 0) {
            arguments.totalIterations = std::stoll(arg.substr(19));
        } else {
            std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
            return false;
        }
    }
    return true;
}

void reportFinalCheckpoints(baton::ckpt::Session& session)
{
    session.onCheckpoint([](const baton::ckpt::SessionCheckpoint& checkpoint) {
        if (checkpoint.final) {
            std::printf("final checkpoint iteration %llu %s at %lld%s\n",
                static_cast<unsigned long long>(checkpoint.stats.iteration),
                checkpoint.stats.committed ? "committed" : "FAILED",
                static_cast<long long>(std::time(nullptr)),
                checkpoint.stats.trainingDone ? " (training done)" : "");
            std::fflush(stdout);
        }
    });
}

// Restores from the chain and says what it found (the lines the tests read).
baton::ckpt::RestoreResult restoreAndReport(baton::ckpt::Session& session, const std::vector<std::uint64_t>& weights)
{
    const auto restored = session.restore();
    std::uint64_t first = 0;
    if (restored.restored) {
        bool intact = true;
        for (std::size_t i = 0; i < weights.size(); ++i) {
            intact = intact && weights[i] == expectedWord(restored.iteration, i);
        }
        std::printf("restored iteration %llu %s\n", static_cast<unsigned long long>(restored.iteration),
            intact ? "verified" : "CORRUPT");
        std::printf("restored from the %s\n", restored.nodeLocal ? "node-local copy" : "chain directory");
        first = restored.iteration + 1;
    } else {
        std::printf("fresh start\n");
    }
    // When training goes on (what a test measures a restart by).
    std::printf("training from iteration %llu at %.3f\n", static_cast<unsigned long long>(first),
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    if (restored.handoverWaitSeconds > 0)
        std::printf("handover wait %.1f s%s\n", restored.handoverWaitSeconds,
            restored.handoverTimedOut ? " (timed out)" : "");
    std::fflush(stdout);
    return restored;
}

// A final checkpoint that says training is done; the exit status.
int declareTrainingDone(baton::ckpt::Session& session, std::uint64_t iteration)
{
    session.markTrainingDone();
    const bool committed = session.finish();
    std::printf("training done at iteration %llu %s\nexiting\n", static_cast<unsigned long long>(iteration),
        committed ? "committed" : "FAILED");
    return committed ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
    Arguments arguments;
    if (!parseArguments(argc, argv, arguments))
        return 2;
    const char* seq = std::getenv("BATON_CHAIN_SEQ");
    std::printf("seq %s\n", seq ? seq : "unset");

    auto options = baton::ckpt::SessionOptions::fromEnvironment();
    options.handleSignals = true; // SIGTERM (the provisioner's handover): final checkpoint, then exit
    baton::ckpt::Session session(std::move(options));
    std::vector<std::uint64_t> weights(1 << 17); // 1 MiB
    session.checkpointer().registerRegion("weights", weights.data(), weights.size() * sizeof weights[0]);
    reportFinalCheckpoints(session);
    const auto restored = restoreAndReport(session, weights);
    const std::uint64_t first = restored.restored ? restored.iteration + 1 : 0;

    // Training already finished in an earlier job (its final checkpoint may not have said so).
    const auto trainingFinished = [&](std::uint64_t next) {
        return arguments.totalIterations >= 0 && next >= static_cast<std::uint64_t>(arguments.totalIterations);
    };
    if (trainingFinished(first))
        return declareTrainingDone(session, restored.iteration);

    const auto started = std::chrono::steady_clock::now();
    for (std::uint64_t it = first; !session.shouldExit(); ++it) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50)); // forward and backward pass
        session.beforeUpdate();
        for (std::size_t i = 0; i < weights.size(); ++i) {
            weights[i] = expectedWord(it, i);
        }
        session.step(it);
        if (trainingFinished(it + 1))
            return declareTrainingDone(session, it);
        if (arguments.runSeconds >= 0
            && std::chrono::steady_clock::now() - started >= std::chrono::seconds(arguments.runSeconds)) {
            std::printf("stopping at iteration %llu\n", static_cast<unsigned long long>(it));
            break;
        }
    }
    session.finish();
    std::printf("exiting\n");
    return 0;
}
