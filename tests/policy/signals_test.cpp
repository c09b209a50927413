#include "baton/ckpt/signals.hpp"

#include "baton/ckpt/policy.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace baton::ckpt;

namespace {

std::atomic<int> previousCalls { 0 };
extern "C" void previousHandler(int)
{
    previousCalls.fetch_add(1);
}

// Sends `signo` to this process from a separate child process, as Slurm would.
void sendFromChild(int signo)
{
    const pid_t parent = getpid();
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        kill(parent, signo);
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
}

// Signals are delivered asynchronously; wait until the flag shows up.
SignalRequests waitFor(SignalHandlers& handlers)
{
    for (int i = 0; i < 2000; ++i) {
        if (handlers.peek().checkpoint)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return handlers.take();
}

} // namespace

TEST(SignalHandlers, Usr1SetsTheCheckpointFlagOnly)
{
    SignalHandlers handlers;
    EXPECT_FALSE(handlers.take().checkpoint);
    sendFromChild(SIGUSR1);
    const SignalRequests requests = waitFor(handlers);
    EXPECT_TRUE(requests.checkpoint);
    EXPECT_FALSE(requests.terminate);
    EXPECT_FALSE(handlers.take().checkpoint) << "take() clears the checkpoint flag";
}

TEST(SignalHandlers, TermSetsBothFlagsAndTerminateStays)
{
    SignalHandlers handlers;
    sendFromChild(SIGTERM);
    const SignalRequests requests = waitFor(handlers);
    EXPECT_TRUE(requests.checkpoint);
    EXPECT_TRUE(requests.terminate);
    EXPECT_TRUE(handlers.take().terminate);
}

TEST(SignalHandlers, RestoresPreviousHandlersAndRefusesASecondInstall)
{
    struct sigaction mine { };
    mine.sa_handler = previousHandler;
    sigemptyset(&mine.sa_mask);
    struct sigaction original { };
    ASSERT_EQ(sigaction(SIGUSR1, &mine, &original), 0);
    {
        SignalHandlers handlers;
        EXPECT_THROW(SignalHandlers second, std::logic_error);
        raise(SIGUSR1);
        EXPECT_TRUE(handlers.take().checkpoint);
        EXPECT_EQ(previousCalls.load(), 0);
    }
    raise(SIGUSR1);
    EXPECT_EQ(previousCalls.load(), 1);
    struct sigaction current { };
    ASSERT_EQ(sigaction(SIGUSR1, &original, &current), 0);
    EXPECT_EQ(current.sa_handler, previousHandler);
    SignalHandlers again; // installable again once the first is gone
}

TEST(SignalHandlers, OptOutLeavesTheSignalAlone)
{
    struct sigaction before { };
    ASSERT_EQ(sigaction(SIGTERM, nullptr, &before), 0);
    SignalHandlers handlers(true, false);
    struct sigaction during { };
    ASSERT_EQ(sigaction(SIGTERM, nullptr, &during), 0);
    EXPECT_EQ(during.sa_handler, before.sa_handler);
}

TEST(SignalPolicy, Usr1CheckpointsAtTheNextBoundaryAndTermExitsAfterCommit)
{
    double now = 0;
    PolicyOptions options;
    options.profileIterations = 2;
    Policy policy(options, [&] { return now; });
    policy.enableSignals();
    // Profile: two clean iterations, then the profiling checkpoint.
    EXPECT_FALSE(policy.onIteration(1.0).checkpoint);
    ASSERT_EQ(policy.onIteration(1.0).reason, CheckpointReason::Profile);
    policy.checkpointCommitted({ 0.1, 0.2, 100 });
    EXPECT_FALSE(policy.onIteration(1.5).checkpoint); // stall 0.5 s: k = 10
    EXPECT_EQ(policy.interval(), 10u);

    raise(SIGUSR1);
    Decision decision = policy.onIteration(1.0);
    EXPECT_TRUE(decision.checkpoint);
    EXPECT_EQ(decision.reason, CheckpointReason::Signal);
    EXPECT_FALSE(decision.final);
    policy.checkpointCommitted({ 0.1, 0.2, 100 });
    EXPECT_FALSE(policy.shouldExit());

    // SIGTERM while a checkpoint is in flight: wait for it, then a final one.
    policy.requestCheckpoint(false);
    ASSERT_TRUE(policy.onIteration(1.0).checkpoint);
    raise(SIGTERM);
    EXPECT_FALSE(policy.onIteration(1.0).checkpoint);
    policy.checkpointCommitted({ 0.1, 0.2, 100 });
    decision = policy.onIteration(1.0);
    EXPECT_TRUE(decision.checkpoint);
    EXPECT_TRUE(decision.final);
    EXPECT_EQ(decision.reason, CheckpointReason::Terminate);
    EXPECT_FALSE(policy.shouldExit());
    policy.checkpointCommitted({ 0.1, 0.2, 100 });
    EXPECT_TRUE(policy.shouldExit());
    EXPECT_FALSE(policy.onIteration(1.0).checkpoint);
    policy.disableSignals();
}
