#include "baton/ckpt/sampler.hpp"

#include <algorithm>
#include <bit>
#include <set>
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
        { "drop_last", state.dropLast }, { "offset", state.offset } };
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
    // Absent in states written before resharding existed: their epochs all start at 0.
    state.offset = json.contains("offset") ? unsignedField(json, "offset") : 0;
}

namespace {

// One rank's samples of an epoch whose remaining positions are `remaining`, split over `ranks` in lockstep.
std::uint64_t share(std::uint64_t remaining, std::uint64_t ranks, bool dropLast)
{
    return dropLast ? remaining / ranks : (remaining + ranks - 1) / ranks;
}

std::string where(const SamplerState& state)
{
    return "rank " + std::to_string(state.rank) + " of " + std::to_string(state.ranks) + " at epoch "
        + std::to_string(state.epoch) + " position " + std::to_string(state.position)
        + (state.offset != 0 ? " (offset " + std::to_string(state.offset) + ")" : "");
}

} // namespace

std::uint64_t consumedPositions(const SamplerState& state)
{
    // A settled state has position < its share of the N − offset positions left, so
    // offset + position · ranks < N; a state at its epoch's end (not yet moved on) has taken it all.
    if (state.offset >= state.size || state.ranks == 0
        || state.position >= share(state.size - state.offset, state.ranks, state.dropLast))
        return state.size;
    return state.offset + state.position * state.ranks;
}

SamplerState reshardedState(std::span<const SamplerState> saved, std::uint64_t ranks, std::uint64_t rank)
{
    if (saved.empty())
        throw std::invalid_argument("sampler: no saved state to continue from");
    const SamplerState& first = saved.front();
    std::set<std::uint64_t> seen;
    for (const SamplerState& other : saved) {
        if (other.seed != first.seed || other.size != first.size || other.dropLast != first.dropLast
            || other.ranks != first.ranks)
            throw std::invalid_argument(
                "sampler: the saved states disagree on seed, size, drop_last or ranks (" + where(first) + ", "
                + where(other) + ")");
        if (other.epoch != first.epoch || other.position != first.position || other.offset != first.offset)
            throw std::invalid_argument("sampler: the saved ranks were not in lockstep (" + where(first)
                + ", " + where(other) + "): the epoch's consumed part is not defined");
        if (!seen.insert(other.rank).second)
            throw std::invalid_argument("sampler: two saved states of rank " + std::to_string(other.rank));
    }
    SamplerState old;
    try {
        old = ResumableSampler(first).state(); // validated and settled (an epoch's end is the next's start)
    } catch (const std::exception& error) {
        throw std::invalid_argument(std::string("the saved sampler state is impossible: ") + error.what());
    }
    SamplerState next = old;
    next.ranks = ranks;
    next.rank = rank;
    if (ranks != old.ranks) {
        next.offset = consumedPositions(old);
        next.position = 0;
    }
    return ResumableSampler(next).state(); // validates this world and settles an epoch with nothing left
}

ResumableSampler::ResumableSampler(
    std::uint64_t size, std::uint64_t seed, std::uint64_t ranks, std::uint64_t rank, bool dropLast)
    : ResumableSampler(SamplerState { seed, 0, 0, size, ranks, rank, dropLast, 0 })
{ }

ResumableSampler::ResumableSampler(const SamplerState& state)
    : state_(state)
{
    if (state_.size == 0 || state_.size > maxSize)
        throw std::invalid_argument("sampler: size must be in [1, 2^62], got " + std::to_string(state_.size));
    if (state_.ranks == 0 || state_.ranks > (std::uint64_t { 1 } << 32) || state_.rank >= state_.ranks)
        throw std::invalid_argument("sampler: rank " + std::to_string(state_.rank) + " is not in [0, "
            + std::to_string(state_.ranks) + ")");
    perEpoch_ = share(state_.size, state_.ranks, state_.dropLast);
    if (perEpoch_ == 0)
        throw std::invalid_argument("sampler: with drop_last, " + std::to_string(state_.ranks)
            + " ranks leave no sample of " + std::to_string(state_.size) + " per rank");
    if (state_.offset >= state_.size)
        throw std::invalid_argument("sampler: offset " + std::to_string(state_.offset)
            + " is not inside the epoch's " + std::to_string(state_.size) + " positions");
    currentEpochSamples_ = share(state_.size - state_.offset, state_.ranks, state_.dropLast);
    if (state_.position > currentEpochSamples_)
        throw std::invalid_argument("sampler: position " + std::to_string(state_.position)
            + " is past the epoch's " + std::to_string(currentEpochSamples_) + " samples");
    settle();
}

std::uint64_t ResumableSampler::samplesInEpoch(std::uint64_t epoch) const
{
    return epoch == state_.epoch ? currentEpochSamples_ : perEpoch_;
}

std::uint64_t ResumableSampler::indexAt(std::uint64_t epoch, std::uint64_t position) const
{
    const std::uint64_t offset = epoch == state_.epoch ? state_.offset : 0;
    const std::uint64_t count = samplesInEpoch(epoch);
    if (position >= count)
        throw std::out_of_range("sampler: position " + std::to_string(position) + " is past the epoch's "
            + std::to_string(count) + " samples");
    // offset + position · ranks + rank < offset + ceil((N − offset)/R)·R <= N + R − 1 <= 2^63: no overflow.
    const std::uint64_t global = (offset + position * state_.ranks + state_.rank) % state_.size;
    return permutedIndex(global, state_.size, state_.seed, epoch);
}

std::uint64_t ResumableSampler::next()
{
    const std::uint64_t index = indexAt(state_.epoch, state_.position);
    ++state_.position;
    settle();
    return index;
}

void ResumableSampler::seek(std::uint64_t epoch, std::uint64_t position)
{
    if (position > perEpoch_)
        throw std::invalid_argument("sampler: position " + std::to_string(position) + " is past the epoch's "
            + std::to_string(perEpoch_) + " samples");
    state_.epoch = epoch;
    state_.position = position;
    state_.offset = 0;
    currentEpochSamples_ = perEpoch_;
    settle();
}

void ResumableSampler::resume(const SamplerState& saved)
{
    resume(std::span<const SamplerState>(&saved, 1));
}

void ResumableSampler::resume(std::span<const SamplerState> saved)
{
    for (const SamplerState& other : saved) {
        if (other.size != state_.size || other.seed != state_.seed || other.dropLast != state_.dropLast)
            throw std::invalid_argument("sampler: the saved state has size " + std::to_string(other.size)
                + ", seed " + std::to_string(other.seed) + ", drop_last "
                + (other.dropLast ? "true" : "false") + "; this sampler size " + std::to_string(state_.size)
                + ", seed " + std::to_string(state_.seed) + ", drop_last "
                + (state_.dropLast ? "true" : "false"));
    }
    *this = ResumableSampler(reshardedState(saved, state_.ranks, state_.rank));
}

void ResumableSampler::settle()
{
    // A resharded epoch may leave this world nothing (drop_last, fewer positions left than ranks).
    while (state_.position == currentEpochSamples_) {
        ++state_.epoch;
        state_.position = 0;
        state_.offset = 0;
        currentEpochSamples_ = perEpoch_;
    }
}

} // namespace baton::ckpt
