#include "baton/ckpt/signals.hpp"

#include <atomic>
#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace baton::ckpt {

namespace {

// Lock-free atomics are async-signal-safe; checked at compile time.
std::atomic<int> checkpointFlag { 0 };
std::atomic<int> terminateFlag { 0 };
std::atomic<bool> installed { false };
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void onSignal(int signo)
{
    checkpointFlag.store(1, std::memory_order_relaxed);
    if (signo == SIGTERM)
        terminateFlag.store(1, std::memory_order_relaxed);
}

void install(int signo, struct sigaction& previous)
{
    struct sigaction action { };
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (sigaction(signo, &action, &previous) != 0)
        throw std::system_error(errno, std::generic_category(), "sigaction");
}

} // namespace

SignalHandlers::SignalHandlers(bool checkpointOnUsr1, bool checkpointOnTerm)
    : usr1_(checkpointOnUsr1)
    , term_(checkpointOnTerm)
{
    if (installed.exchange(true))
        throw std::logic_error("checkpoint signal handlers are already installed in this process");
    checkpointFlag.store(0);
    terminateFlag.store(0);
    try {
        if (usr1_)
            install(SIGUSR1, previousUsr1_);
        if (term_)
            install(SIGTERM, previousTerm_);
    } catch (...) {
        if (usr1_)
            sigaction(SIGUSR1, &previousUsr1_, nullptr);
        installed.store(false);
        throw;
    }
}

SignalHandlers::~SignalHandlers()
{
    if (term_)
        sigaction(SIGTERM, &previousTerm_, nullptr);
    if (usr1_)
        sigaction(SIGUSR1, &previousUsr1_, nullptr);
    installed.store(false);
}

SignalRequests SignalHandlers::take()
{
    SignalRequests requests;
    requests.checkpoint = checkpointFlag.exchange(0) != 0;
    requests.terminate = terminateFlag.load() != 0;
    return requests;
}

SignalRequests SignalHandlers::peek() const
{
    return { checkpointFlag.load() != 0, terminateFlag.load() != 0 };
}

} // namespace baton::ckpt
