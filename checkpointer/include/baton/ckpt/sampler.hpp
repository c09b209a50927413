// A resumable, sharded, deterministic data order. Epoch e visits the N indices in the order of a keyed
// bijection of [0, N) (a Feistel network with cycle-walking, keyed by seed and epoch), so the index at
// any position is computed in O(1) with no per-index state, and resuming from (epoch, position) needs
// no replay of earlier batches.
#pragma once

#include <cstdint>
#include <span>

#include <nlohmann/json_fwd.hpp>

namespace baton::ckpt {

// The permutation itself: position -> index in [0, size), a bijection for each (seed, epoch).
// size must be in [1, 2^62].
std::uint64_t permutedIndex(
    std::uint64_t position, std::uint64_t size, std::uint64_t seed, std::uint64_t epoch);

// Saved in the manifest's `sampler` field. `position` counts the samples this rank has taken in `epoch`
// since `offset`: the epoch's first `offset` positions were taken by the ranks of another world size
// before a restore resharded the epoch's remainder onto this one (0 otherwise, and in older states).
struct SamplerState {
    std::uint64_t seed = 0;
    std::uint64_t epoch = 0;
    std::uint64_t position = 0;
    std::uint64_t size = 0;
    std::uint64_t ranks = 1;
    std::uint64_t rank = 0;
    bool dropLast = false;
    std::uint64_t offset = 0;
};

void to_json(nlohmann::json& json, const SamplerState& state);
// Throws std::invalid_argument (naming the field) for a missing or mistyped field.
void from_json(const nlohmann::json& json, SamplerState& state);

// The number of the epoch's positions that the ranks of `state` have taken together, all in lockstep
// (every rank at the same position, as data-parallel ranks are): offset + position · ranks. Positions
// past the epoch's end (padding, below) do not count: the result is at most size.
std::uint64_t consumedPositions(const SamplerState& state);

// The state with which rank `rank` of `ranks` continues the epoch that the ranks of `saved` were taking
// in lockstep: the first G = consumedPositions() positions are done, and rank r takes G + r,
// G + r + ranks, ... of the same epoch order, then the next epoch as usual. The same world size keeps
// the saved position (and offset). `saved` holds the states of some or all of the old ranks (one is
// enough; a data-parallel checkpoint restored on another world size hands every rank rank 0's); they
// must agree on everything but `rank`, which must differ. Throws std::invalid_argument for an empty
// list, states that disagree (named: ranks that were not in lockstep) or an impossible state.
SamplerState reshardedState(std::span<const SamplerState> saved, std::uint64_t ranks, std::uint64_t rank);

// Rank r of R takes the epoch's positions r, r + R, r + 2R, ... When R does not divide N:
//  - dropLast = false (default, like PyTorch's DistributedSampler): every rank takes ceil(N / R)
//    samples; positions past the end wrap around to the epoch's first positions, so a few indices are
//    seen twice in that epoch and every index at least once;
//  - dropLast = true: every rank takes floor(N / R) samples; the last N mod R positions of the epoch
//    are skipped (a different set each epoch, since the order changes).
// After a reshard (resume() of a state of another world size) the current epoch starts at the
// state's offset G instead of 0: rank r takes G + r, G + r + R, ..., the same rule applied to the
// N − G remaining positions (ceil or floor of (N − G) / R samples each; padding wraps to the epoch's
// first positions). Later epochs start at 0.
class ResumableSampler {
public:
    // Throws std::invalid_argument for size 0 or > 2^62, ranks 0, rank >= ranks, or an empty shard.
    explicit ResumableSampler(const SamplerState& state);
    ResumableSampler(std::uint64_t size, std::uint64_t seed, std::uint64_t ranks = 1, std::uint64_t rank = 0,
        bool dropLast = false);

    // The next index of this rank; moves on to the next epoch after the last one.
    std::uint64_t next();
    // The index this rank takes at (epoch, position), without moving; position < samplesInEpoch(epoch)
    // (positions of the current epoch count from its offset, of any other epoch from 0).
    std::uint64_t indexAt(std::uint64_t epoch, std::uint64_t position) const;
    // Continue from (epoch, position) in O(1), the position counted from the epoch's beginning (a
    // reshard's offset is dropped).
    void seek(std::uint64_t epoch, std::uint64_t position);
    // Continue where the saved state left off, on this sampler's world size and rank (reshardedState()).
    // Throws std::invalid_argument when the state is of another data set size, seed or drop_last, or
    // cannot be mapped; the sampler is then unchanged.
    void resume(const SamplerState& saved);
    void resume(std::span<const SamplerState> saved);

    // This rank's samples in an epoch that starts at position 0 (every epoch but a resharded one).
    std::uint64_t samplesPerEpoch() const { return perEpoch_; }
    // This rank's samples in `epoch`: fewer than samplesPerEpoch() in the current epoch after a reshard.
    std::uint64_t samplesInEpoch(std::uint64_t epoch) const;
    std::uint64_t epoch() const { return state_.epoch; }
    std::uint64_t position() const { return state_.position; }
    std::uint64_t offset() const { return state_.offset; }
    const SamplerState& state() const { return state_; }

private:
    // Normalises (epoch, position) after a move: the end of an epoch is the start of the next.
    void settle();

    SamplerState state_;
    std::uint64_t perEpoch_ = 0;
    std::uint64_t currentEpochSamples_ = 0; // samplesInEpoch(state_.epoch)
};

} // namespace baton::ckpt
