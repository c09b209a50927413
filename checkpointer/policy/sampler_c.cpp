#include "baton_sampler.h"

#include "checkpointer/src/c_api_error.hpp"
#include "sampler_handle.hpp"

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

namespace {

thread_local baton::ckpt::capi::LastError lastError;

} // namespace

extern "C" {

baton_sampler* baton_sampler_create(
    uint64_t size, uint64_t seed, uint64_t ranks, uint64_t rank, int drop_last)
{
    return lastError.created([&] {
        return new baton_sampler { baton::ckpt::ResumableSampler(size, seed, ranks, rank, drop_last != 0) };
    });
}

baton_sampler* baton_sampler_from_json(const char* json)
{
    if (!lastError.present(json))
        return nullptr;
    return lastError.created([&] {
        const auto parsed = nlohmann::json::parse(json);
        return new baton_sampler { baton::ckpt::ResumableSampler(parsed.get<baton::ckpt::SamplerState>()) };
    });
}

void baton_sampler_destroy(baton_sampler* sampler)
{
    delete sampler;
}

int baton_sampler_next(baton_sampler* sampler, uint64_t* index)
{
    if (!lastError.present(sampler) || !lastError.present(index))
        return -1;
    return lastError.guarded([&] { *index = sampler->sampler.next(); });
}

int baton_sampler_next_many(baton_sampler* sampler, uint64_t* out, size_t count)
{
    if (!lastError.present(sampler) || (count > 0 && !lastError.present(out)))
        return -1;
    return lastError.guarded([&] {
        for (size_t i = 0; i < count; ++i)
            out[i] = sampler->sampler.next();
    });
}

int baton_sampler_index_at(const baton_sampler* sampler, uint64_t epoch, uint64_t position, uint64_t* index)
{
    if (!lastError.present(sampler) || !lastError.present(index))
        return -1;
    return lastError.guarded([&] { *index = sampler->sampler.indexAt(epoch, position); });
}

int baton_sampler_seek(baton_sampler* sampler, uint64_t epoch, uint64_t position)
{
    if (!lastError.present(sampler))
        return -1;
    return lastError.guarded([&] { sampler->sampler.seek(epoch, position); });
}

int baton_sampler_resume(baton_sampler* sampler, const char* state_json)
{
    if (!lastError.present(sampler) || !lastError.present(state_json))
        return -1;
    return lastError.guarded(
        [&] { sampler->sampler.resume(nlohmann::json::parse(state_json).get<baton::ckpt::SamplerState>()); });
}

uint64_t baton_sampler_epoch(const baton_sampler* sampler)
{
    return sampler ? sampler->sampler.epoch() : 0;
}

uint64_t baton_sampler_position(const baton_sampler* sampler)
{
    return sampler ? sampler->sampler.position() : 0;
}

uint64_t baton_sampler_samples_per_epoch(const baton_sampler* sampler)
{
    return sampler ? sampler->sampler.samplesPerEpoch() : 0;
}

uint64_t baton_sampler_samples_in_epoch(const baton_sampler* sampler)
{
    return sampler ? sampler->sampler.samplesInEpoch(sampler->sampler.epoch()) : 0;
}

size_t baton_sampler_state_json(const baton_sampler* sampler, char* buffer, size_t capacity)
{
    if (!lastError.present(sampler))
        return 0;
    const std::string text = nlohmann::json(sampler->sampler.state()).dump();
    if (buffer != nullptr && text.size() < capacity)
        std::memcpy(buffer, text.c_str(), text.size() + 1);
    return text.size();
}

const char* baton_sampler_last_error(void)
{
    return lastError.c_str();
}

} // extern "C"
