#include "baton_session.h"

#include "baton/ckpt/error.hpp"
#include "baton/ckpt/session.hpp"
#include "checkpointer/policy/sampler_handle.hpp"
#include "checkpointer/src/c_api_error.hpp"
#include "checkpointer/src/c_api_handle.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct baton_session {
    std::unique_ptr<baton::ckpt::Session> session;
    std::map<std::string, std::vector<std::byte>> blobs;
    double handoverWaitSeconds = 0;
};

namespace {

using baton::ckpt::Session;
using baton::ckpt::SessionOptions;

thread_local baton::ckpt::capi::LastError lastError;

// The policy settings of the environment (BATON_OVERHEAD, BATON_DEADLINE, ...), unusable ones a ConfigError.
void readPolicyEnvironment(SessionOptions& options)
{
    try {
        options.policy = baton::ckpt::applyEnvironment(options.policy);
    } catch (const std::invalid_argument& error) {
        throw baton::ckpt::ConfigError(error.what());
    }
}

// The caller's arguments, over the settings of the environment.
void applyArguments(SessionOptions& options, double overheadPercent, int handleSignals)
{
    if (overheadPercent > 0)
        options.policy.targetPercent = overheadPercent;
    options.handleSignals = handleSignals != 0;
}

} // namespace

extern "C" {

baton_session* baton_session_create(const char* chain_dir, double overhead_percent, int handle_signals)
{
    return lastError.created([&] {
        SessionOptions options;
        if (chain_dir == nullptr) {
            options = SessionOptions::fromEnvironment();
        } else {
            options.checkpointer.chainDir = chain_dir;
            readPolicyEnvironment(options);
        }
        applyArguments(options, overhead_percent, handle_signals);
        return new baton_session { std::make_unique<Session>(std::move(options)), {}, 0 };
    });
}

baton_session* baton_session_create_for(baton_ckpt* ckpt, double overhead_percent, int handle_signals)
{
    if (!lastError.present(ckpt))
        return nullptr;
    return lastError.created([&] {
        SessionOptions options;
        readPolicyEnvironment(options);
        applyArguments(options, overhead_percent, handle_signals);
        return new baton_session { std::make_unique<Session>(*ckpt->checkpointer, std::move(options)), {},
            0 };
    });
}

void baton_session_destroy(baton_session* session)
{
    delete session;
}

int baton_session_register_region(baton_session* session, const char* name, void* data, size_t size)
{
    if (!lastError.present(session) || !lastError.present(name))
        return -1;
    return lastError.guarded([&] { session->session->checkpointer().registerRegion(name, data, size); });
}

int baton_session_set_blob(baton_session* session, const char* name, const void* data, size_t size)
{
    if (!lastError.present(session) || !lastError.present(name) || (size > 0 && !lastError.present(data)))
        return -1;
    return lastError.guarded([&] {
        session->session->checkpointer().setBlob(name, std::span(static_cast<const std::byte*>(data), size));
    });
}

int baton_session_attach_sampler(baton_session* session, baton_sampler* sampler)
{
    if (!lastError.present(session))
        return -1;
    session->session->attachSampler(sampler != nullptr ? &sampler->sampler : nullptr);
    return 0;
}

int baton_session_set_deadline(baton_session* session, double epoch_seconds)
{
    if (!lastError.present(session))
        return -1;
    if (epoch_seconds > 0)
        session->session->policy().setDeadline(epoch_seconds);
    else
        session->session->policy().setDeadline(std::nullopt);
    return 0;
}

int baton_session_restore(baton_session* session, uint64_t* iteration)
{
    if (!lastError.present(session))
        return -1;
    return lastError.guarded([&] {
        auto result = session->session->restore();
        session->handoverWaitSeconds = result.handoverWaitSeconds;
        if (!result.restored)
            return 0;
        session->blobs = std::move(result.blobs);
        if (iteration != nullptr)
            *iteration = result.iteration;
        return 1;
    });
}

int64_t baton_session_blob(const baton_session* session, const char* name, void* buffer, size_t capacity)
{
    if (!lastError.present(session) || !lastError.present(name))
        return -1;
    const auto found = session->blobs.find(name);
    if (found == session->blobs.end()) {
        lastError.set(std::string("no restored blob named '") + name + "'");
        return -1;
    }
    if (buffer != nullptr && found->second.size() <= capacity)
        std::memcpy(buffer, found->second.data(), found->second.size());
    return static_cast<int64_t>(found->second.size());
}

int baton_session_request_checkpoint(baton_session* session, int exit_after)
{
    if (!lastError.present(session))
        return -1;
    session->session->requestCheckpoint(exit_after != 0);
    return 0;
}

int baton_session_before_update(baton_session* session)
{
    if (!lastError.present(session))
        return -1;
    return lastError.guarded([&] { session->session->beforeUpdate(); });
}

int baton_session_step(baton_session* session, uint64_t iteration)
{
    if (!lastError.present(session))
        return -1;
    return lastError.guarded([&] { return session->session->step(iteration).checkpoint ? 1 : 0; });
}

int baton_session_finish(baton_session* session)
{
    if (!lastError.present(session))
        return -1;
    return lastError.guarded([&] {
        // Only the final checkpoint of finished training is an error here: without it the chain goes on.
        if (!session->session->finish() && session->session->trainingDone())
            throw baton::ckpt::Error("the final checkpoint of finished training did not commit: "
                + session->session->checkpointer().lastError());
    });
}

int baton_session_mark_training_done(baton_session* session)
{
    if (!lastError.present(session))
        return -1;
    session->session->markTrainingDone();
    return 0;
}

double baton_session_handover_wait_seconds(const baton_session* session)
{
    return session != nullptr ? session->handoverWaitSeconds : 0.0;
}

int baton_session_should_exit(const baton_session* session)
{
    return session != nullptr && session->session->shouldExit() ? 1 : 0;
}

uint64_t baton_session_interval(const baton_session* session)
{
    return session != nullptr ? session->session->interval() : 0;
}

double baton_session_overhead_percent(const baton_session* session)
{
    return session != nullptr ? session->session->measuredOverheadPercent() : 0.0;
}

const char* baton_session_last_error(void)
{
    return lastError.c_str();
}

} // extern "C"
