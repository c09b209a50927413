// A synthetic training job on the real checkpointer: sleeps for its "forward and backward pass",
// updates a state buffer, and lets a Session decide when to checkpoint. Settings come from BATON_*
// (chain directory, deadline, margin) and the arguments:
//     session_job <iteration ms> <state MiB> <max seconds> [signals]
// Prints one line per checkpoint and, when the session says to exit, the time its final checkpoint
// was known committed: "final <reason> committed_unix=<epoch seconds>". Exit 0 after a final
// checkpoint, 3 if <max seconds> passed without one, 2 on bad arguments or settings.
#include "baton/ckpt/session.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

using namespace baton::ckpt;

namespace {

double unixNow()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: session_job <iteration ms> <state MiB> <max seconds> [signals]\n");
        return 2;
    }
    try {
        const auto iteration = std::chrono::milliseconds(std::stol(argv[1]));
        const std::size_t bytes = std::stoul(argv[2]) << 20;
        const double maxSeconds = std::stod(argv[3]);
        SessionOptions options = SessionOptions::fromEnvironment();
        options.handleSignals = argc > 4 && std::string(argv[4]) == "signals";
        options.checkpointer.log = [](std::string_view line) {
            std::printf("log %.*s\n", static_cast<int>(line.size()), line.data());
        };
        Session session(std::move(options));
        std::vector<unsigned char> state(bytes, 0);
        session.checkpointer().registerRegion("state", state.data(), state.size());
        double finalCommitted = 0;
        session.onCheckpoint([&](const SessionCheckpoint& done) {
            std::printf("checkpoint %llu %s committed=%d snapshot=%.4f persist=%.4f\n",
                static_cast<unsigned long long>(done.stats.iteration), toString(done.reason),
                done.stats.committed ? 1 : 0, done.stats.snapshotSeconds, done.stats.persistSeconds);
            if (done.final && done.stats.committed)
                finalCommitted = unixNow();
        });
        const auto restored = session.restore();
        const double start = unixNow();
        for (std::uint64_t it = restored.restored ? restored.iteration + 1 : 0; !session.shouldExit(); ++it) {
            if (unixNow() - start > maxSeconds) {
                std::printf("no final checkpoint after %.0f s\n", maxSeconds);
                return 3;
            }
            std::this_thread::sleep_for(iteration);
            session.beforeUpdate();
            for (std::size_t i = 0; i < state.size(); i += 4096)
                state[i] = static_cast<unsigned char>(it);
            session.step(it);
        }
        std::printf("final committed_unix=%.6f interval=%llu overhead=%.3f\n", finalCommitted,
            static_cast<unsigned long long>(session.interval()), session.measuredOverheadPercent());
        return 0;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "session_job: %s\n", error.what());
        return 2;
    }
}
