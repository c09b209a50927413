#include "baton/ckpt/sampler.hpp"

#include <bit>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace baton::ckpt {

namespace {

constexpr std::uint64_t maxSize = std::uint64_t { 1 } << 62;
constexpr int rounds = 6;

// splitmix64's finaliser: a fast, well-mixing 64-bit bijection.
std::uint64_t mix(std::uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

// A balanced Feistel network on 2·half bits is a bijection whatever the round function.
std::uint64_t feistel(std::uint64_t x, unsigned half, const std::uint64_t (&keys)[rounds])
{
    const std::uint64_t mask = (std::uint64_t { 1 } << half) - 1;
    std::uint64_t left = x >> half;
    std::uint64_t right = x & mask;
    for (std::uint64_t key : keys) {
        const std::uint64_t next = left ^ (mix(right ^ key) & mask);
        left = right;
        right = next;
    }
    return (left << half) | right;
}

} // namespace

std::uint64_t permutedIndex(
    std::uint64_t position, std::uint64_t size, std::uint64_t seed, std::uint64_t epoch)
{
    if (size == 0 || size > maxSize || position >= size)
        throw std::out_of_range("sampler: position outside [0, size) or size outside [1, 2^62]");
    // Smallest even number of bits covering size: the domain is < 4·size, so cycle-walking (apply the
    // permutation again until the value falls inside [0, size)) takes < 4 steps on average.
    unsigned bits = static_cast<unsigned>(std::bit_width(size - 1));
    bits = std::max(2u, bits + (bits & 1u));
    std::uint64_t keys[rounds];
    const std::uint64_t base = mix(seed ^ mix(epoch + 0x9e3779b97f4a7c15ULL));
    for (int i = 0; i < rounds; ++i)
        keys[i] = mix(base + static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ULL);
    std::uint64_t x = position;
    do
        x = feistel(x, bits / 2, keys);
    while (x >= size);
    return x;
}

void to_json(nlohmann::json& json, const SamplerState& state)
{
    json = nlohmann::json { { "seed", state.seed }, { "epoch", state.epoch }, { "position", state.position },
        { "size", state.size }, { "ranks", state.ranks }, { "rank", state.rank },
        { "drop_last", state.dropLast } };
}

namespace {

std::uint64_t unsignedField(const nlohmann::json& json, const char* name)
{
    const auto it = json.find(name);
    if (it == json.end() || !it->is_number_unsigned())
        throw std::invalid_argument(
            std::string("sampler state: '") + name + "' must be a non-negative integer");
    return it->get<std::uint64_t>();
}

} // namespace

void from_json(const nlohmann::json& json, SamplerState& state)
{
    if (!json.is_object())
        throw std::invalid_argument("sampler state must be a JSON object");
    state.seed = unsignedField(json, "seed");
    state.epoch = unsignedField(json, "epoch");
    state.position = unsignedField(json, "position");
    state.size = unsignedField(json, "size");
    state.ranks = unsignedField(json, "ranks");
    state.rank = unsignedField(json, "rank");
    const auto drop = json.find("drop_last");
    if (drop != json.end() && !drop->is_boolean())
        throw std::invalid_argument("sampler state: 'drop_last' must be true or false");
    state.dropLast = drop != json.end() && drop->get<bool>();
}

ResumableSampler::ResumableSampler(
    std::uint64_t size, std::uint64_t seed, std::uint64_t ranks, std::uint64_t rank, bool dropLast)
    : ResumableSampler(SamplerState { seed, 0, 0, size, ranks, rank, dropLast })
{ }

ResumableSampler::ResumableSampler(const SamplerState& state)
    : state_(state)
{
    if (state_.size == 0 || state_.size > maxSize)
        throw std::invalid_argument("sampler: size must be in [1, 2^62], got " + std::to_string(state_.size));
    if (state_.ranks == 0 || state_.ranks > (std::uint64_t { 1 } << 32) || state_.rank >= state_.ranks)
        throw std::invalid_argument("sampler: rank " + std::to_string(state_.rank) + " is not in [0, "
            + std::to_string(state_.ranks) + ")");
    perEpoch_
        = state_.dropLast ? state_.size / state_.ranks : (state_.size + state_.ranks - 1) / state_.ranks;
    if (perEpoch_ == 0)
        throw std::invalid_argument("sampler: with drop_last, " + std::to_string(state_.ranks)
            + " ranks leave no sample of " + std::to_string(state_.size) + " per rank");
    seek(state_.epoch, state_.position);
}

std::uint64_t ResumableSampler::indexAt(std::uint64_t epoch, std::uint64_t position) const
{
    if (position >= perEpoch_)
        throw std::out_of_range("sampler: position " + std::to_string(position) + " is past the epoch's "
            + std::to_string(perEpoch_) + " samples");
    // position · ranks + rank < ceil(N/R)·R <= N + R - 1 <= 2^63: no overflow.
    const std::uint64_t global = (position * state_.ranks + state_.rank) % state_.size;
    return permutedIndex(global, state_.size, state_.seed, epoch);
}

std::uint64_t ResumableSampler::next()
{
    const std::uint64_t index = indexAt(state_.epoch, state_.position);
    if (++state_.position == perEpoch_) {
        ++state_.epoch;
        state_.position = 0;
    }
    return index;
}

void ResumableSampler::seek(std::uint64_t epoch, std::uint64_t position)
{
    if (position > perEpoch_)
        throw std::invalid_argument("sampler: position " + std::to_string(position) + " is past the epoch's "
            + std::to_string(perEpoch_) + " samples");
    state_.epoch = epoch;
    state_.position = position;
    if (state_.position == perEpoch_) {
        ++state_.epoch;
        state_.position = 0;
    }
}

} // namespace baton::ckpt
