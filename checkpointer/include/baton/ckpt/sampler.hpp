// A resumable, sharded, deterministic data order. Epoch e visits the N indices in the order of a keyed
// bijection of [0, N) (a Feistel network with cycle-walking, keyed by seed and epoch), so the index at
// any position is computed in O(1) with no per-index state, and resuming from (epoch, position) needs
// no replay of earlier batches.
#pragma once

#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace baton::ckpt {

// The permutation itself: position -> index in [0, size), a bijection for each (seed, epoch).
// size must be in [1, 2^62].
std::uint64_t permutedIndex(
    std::uint64_t position, std::uint64_t size, std::uint64_t seed, std::uint64_t epoch);

// Saved in the manifest's `sampler` field. `position` counts the samples this rank has taken in `epoch`.
struct SamplerState {
    std::uint64_t seed = 0;
    std::uint64_t epoch = 0;
    std::uint64_t position = 0;
    std::uint64_t size = 0;
    std::uint64_t ranks = 1;
    std::uint64_t rank = 0;
    bool dropLast = false;
};

void to_json(nlohmann::json& json, const SamplerState& state);
// Throws std::invalid_argument (naming the field) for a missing or mistyped field.
void from_json(const nlohmann::json& json, SamplerState& state);

// Rank r of R takes the epoch's positions r, r + R, r + 2R, ... When R does not divide N:
//  - dropLast = false (default, like PyTorch's DistributedSampler): every rank takes ceil(N / R)
//    samples; positions past the end wrap around to the epoch's first positions, so a few indices are
//    seen twice in that epoch and every index at least once;
//  - dropLast = true: every rank takes floor(N / R) samples; the last N mod R positions of the epoch
//    are skipped (a different set each epoch, since the order changes).
class ResumableSampler {
public:
    // Throws std::invalid_argument for size 0 or > 2^62, ranks 0, rank >= ranks, or an empty shard.
    explicit ResumableSampler(const SamplerState& state);
    ResumableSampler(std::uint64_t size, std::uint64_t seed, std::uint64_t ranks = 1, std::uint64_t rank = 0,
        bool dropLast = false);

    // The next index of this rank; moves on to the next epoch after the last one.
    std::uint64_t next();
    // The index this rank takes at (epoch, position), without moving; position < samplesPerEpoch().
    std::uint64_t indexAt(std::uint64_t epoch, std::uint64_t position) const;
    // Continue from (epoch, position) in O(1).
    void seek(std::uint64_t epoch, std::uint64_t position);

    std::uint64_t samplesPerEpoch() const { return perEpoch_; }
    std::uint64_t epoch() const { return state_.epoch; }
    std::uint64_t position() const { return state_.position; }
    const SamplerState& state() const { return state_; }

private:
    SamplerState state_;
    std::uint64_t perEpoch_ = 0;
};

} // namespace baton::ckpt
