#include "baton_sampler.h"

#include "sampler_handle.hpp"

#include <cstring>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

namespace {

thread_local std::string lastError;

template<typename Body> int guarded(Body&& body)
{
    try {
        body();
        return 0;
    } catch (const std::exception& error) {
        lastError = error.what();
    } catch (...) {
        lastError = "unknown error";
    }
    return -1;
}

template<typename Make> baton_sampler* create(Make&& make)
{
    baton_sampler* created = nullptr;
    guarded([&] { created = new baton_sampler { make() }; });
    return created;
}

bool present(const void* pointer)
{
    if (pointer == nullptr)
        lastError = "null argument";
    return pointer != nullptr;
}

} // namespace

extern "C" {

baton_sampler* baton_sampler_create(
    uint64_t size, uint64_t seed, uint64_t ranks, uint64_t rank, int drop_last)
{
    return create([&] { return baton::ckpt::ResumableSampler(size, seed, ranks, rank, drop_last != 0); });
}

baton_sampler* baton_sampler_from_json(const char* json)
{
    if (!present(json))
        return nullptr;
    return create([&] {
        const auto parsed = nlohmann::json::parse(json);
        return baton::ckpt::ResumableSampler(parsed.get<baton::ckpt::SamplerState>());
    });
}

void baton_sampler_destroy(baton_sampler* sampler)
{
    delete sampler;
}

int baton_sampler_next(baton_sampler* sampler, uint64_t* index)
{
    if (!present(sampler) || !present(index))
        return -1;
    return guarded([&] { *index = sampler->sampler.next(); });
}

int baton_sampler_next_many(baton_sampler* sampler, uint64_t* out, size_t count)
{
    if (!present(sampler) || (count > 0 && !present(out)))
        return -1;
    return guarded([&] {
        for (size_t i = 0; i < count; ++i)
            out[i] = sampler->sampler.next();
    });
}

int baton_sampler_index_at(const baton_sampler* sampler, uint64_t epoch, uint64_t position, uint64_t* index)
{
    if (!present(sampler) || !present(index))
        return -1;
    return guarded([&] { *index = sampler->sampler.indexAt(epoch, position); });
}

int baton_sampler_seek(baton_sampler* sampler, uint64_t epoch, uint64_t position)
{
    if (!present(sampler))
        return -1;
    return guarded([&] { sampler->sampler.seek(epoch, position); });
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

size_t baton_sampler_state_json(const baton_sampler* sampler, char* buffer, size_t capacity)
{
    if (!present(sampler))
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
