#include "baton/ckpt/sampler.hpp"

#include "baton_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

using namespace baton::ckpt;

extern "C" int samplerFromC(void); // sampler_c_check.c: the C header used from C

TEST(PermutedIndex, IsABijectionForManySizes)
{
    for (std::uint64_t size :
        { 1ull, 2ull, 3ull, 4ull, 5ull, 7ull, 16ull, 17ull, 100ull, 1000ull, 4097ull, 65536ull }) {
        for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
            std::vector<bool> seen(size, false);
            for (std::uint64_t i = 0; i < size; ++i) {
                const std::uint64_t index = permutedIndex(i, size, 42, epoch);
                ASSERT_LT(index, size);
                ASSERT_FALSE(seen[index]) << "size " << size << " epoch " << epoch << " repeats " << index;
                seen[index] = true;
            }
        }
    }
}

TEST(PermutedIndex, DependsOnSeedAndEpochAndLooksShuffled)
{
    const std::uint64_t size = 10000;
    std::uint64_t sameAsEpoch0 = 0;
    std::uint64_t sameAsOtherSeed = 0;
    std::uint64_t fixedPoints = 0;
    for (std::uint64_t i = 0; i < size; ++i) {
        const auto a = permutedIndex(i, size, 7, 0);
        sameAsEpoch0 += a == permutedIndex(i, size, 7, 1);
        sameAsOtherSeed += a == permutedIndex(i, size, 8, 0);
        fixedPoints += a == i;
        EXPECT_EQ(a, permutedIndex(i, size, 7, 0)); // deterministic
    }
    // A random permutation agrees with another in ~1 place; allow generous slack.
    EXPECT_LT(sameAsEpoch0, 20u);
    EXPECT_LT(sameAsOtherSeed, 20u);
    EXPECT_LT(fixedPoints, 20u);
    // Large domains work in O(1) without any per-index state.
    const std::uint64_t huge = std::uint64_t { 1 } << 62;
    EXPECT_LT(permutedIndex(huge - 1, huge, 1, 1), huge);
    EXPECT_THROW(permutedIndex(5, 5, 1, 1), std::out_of_range);
}

namespace {

// The whole stream of a rank for `epochs` epochs, drawn with next().
std::vector<std::uint64_t> stream(const SamplerState& start, std::uint64_t count)
{
    ResumableSampler sampler(start);
    std::vector<std::uint64_t> out;
    for (std::uint64_t i = 0; i < count; ++i)
        out.push_back(sampler.next());
    return out;
}

} // namespace

TEST(ResumableSampler, ResumingFromAnyPositionYieldsExactlyTheRest)
{
    for (std::uint64_t ranks : { 1ull, 2ull, 3ull, 4ull, 7ull }) {
        for (bool dropLast : { false, true }) {
            const std::uint64_t size = 53;
            for (std::uint64_t rank = 0; rank < ranks; ++rank) {
                ResumableSampler reference(size, 99, ranks, rank, dropLast);
                const std::uint64_t total = 3 * reference.samplesPerEpoch() + 5; // crosses epoch boundaries
                const auto full = stream(reference.state(), total);
                ResumableSampler walker(size, 99, ranks, rank, dropLast);
                for (std::uint64_t taken = 0; taken < total; ++taken) {
                    // Save, serialise through JSON as the manifest does, restore, and compare the rest.
                    const nlohmann::json saved = walker.state();
                    const auto rest = stream(saved.get<SamplerState>(), total - taken);
                    ASSERT_TRUE(std::equal(rest.begin(), rest.end(), full.begin() + static_cast<long>(taken)))
                        << "ranks " << ranks << " rank " << rank << " resumed after " << taken;
                    walker.next();
                }
            }
        }
    }
}

TEST(ResumableSampler, ShardsCoverTheEpochPerTheDropOrPadRule)
{
    const std::uint64_t size = 50;
    for (std::uint64_t ranks : { 1ull, 3ull, 4ull, 8ull }) {
        std::multiset<std::uint64_t> padded;
        std::multiset<std::uint64_t> dropped;
        for (std::uint64_t rank = 0; rank < ranks; ++rank) {
            ResumableSampler pad(size, 5, ranks, rank, false);
            ResumableSampler drop(size, 5, ranks, rank, true);
            EXPECT_EQ(pad.samplesPerEpoch(), (size + ranks - 1) / ranks);
            EXPECT_EQ(drop.samplesPerEpoch(), size / ranks);
            for (std::uint64_t i = 0; i < pad.samplesPerEpoch(); ++i)
                padded.insert(pad.next());
            for (std::uint64_t i = 0; i < drop.samplesPerEpoch(); ++i)
                dropped.insert(drop.next());
            EXPECT_EQ(pad.epoch(), 1u);
            EXPECT_EQ(pad.position(), 0u);
        }
        // Pad: every index at least once, the ceil(N/R)·R − N extra ones twice.
        std::set<std::uint64_t> distinct(padded.begin(), padded.end());
        EXPECT_EQ(distinct.size(), size);
        EXPECT_EQ(padded.size(), (size + ranks - 1) / ranks * ranks);
        // Drop: floor(N/R)·R distinct indices, N mod R left out.
        std::set<std::uint64_t> distinctDropped(dropped.begin(), dropped.end());
        EXPECT_EQ(distinctDropped.size(), dropped.size());
        EXPECT_EQ(dropped.size(), size / ranks * ranks);
    }
}

TEST(ResumableSampler, SeekIsConstantTimeAndMatchesIndexAt)
{
    ResumableSampler sampler(1'000'000'000, 3, 8, 5);
    sampler.seek(1000, 123'456);
    const std::uint64_t expected = sampler.indexAt(1000, 123'456);
    EXPECT_EQ(sampler.next(), expected);
    EXPECT_EQ(sampler.position(), 123'457u);
    sampler.seek(4, sampler.samplesPerEpoch()); // the end of an epoch is the start of the next
    EXPECT_EQ(sampler.epoch(), 5u);
    EXPECT_EQ(sampler.position(), 0u);
    EXPECT_THROW(sampler.seek(0, sampler.samplesPerEpoch() + 1), std::invalid_argument);
}

TEST(ResumableSampler, RejectsBadConfigurationAndState)
{
    EXPECT_THROW(ResumableSampler(0, 1), std::invalid_argument);
    EXPECT_THROW(ResumableSampler(10, 1, 0, 0), std::invalid_argument);
    EXPECT_THROW(ResumableSampler(10, 1, 2, 2), std::invalid_argument);
    EXPECT_THROW(ResumableSampler(3, 1, 4, 0, true), std::invalid_argument);
    EXPECT_NO_THROW(ResumableSampler(3, 1, 4, 3, false));
    EXPECT_THROW(nlohmann::json::parse(R"({"seed":1})").get<SamplerState>(), std::invalid_argument);
    EXPECT_THROW(nlohmann::json::parse(R"({"seed":1,"epoch":-1,"position":0,"size":4,"ranks":1,"rank":0})")
                     .get<SamplerState>(),
        std::invalid_argument);
    const auto state
        = nlohmann::json::parse(R"({"seed":1,"epoch":2,"position":3,"size":4,"ranks":1,"rank":0})")
              .get<SamplerState>();
    EXPECT_EQ(state.epoch, 2u);
    EXPECT_FALSE(state.dropLast);
    EXPECT_EQ(state.offset, 0u); // written before resharding existed
    EXPECT_THROW(
        nlohmann::json::parse(R"({"seed":1,"epoch":2,"position":3,"size":4,"ranks":1,"rank":0,"offset":-2})")
            .get<SamplerState>(),
        std::invalid_argument);
}

namespace {

std::uint64_t share(std::uint64_t remaining, std::uint64_t ranks, bool dropLast)
{
    return dropLast ? remaining / ranks : (remaining + ranks - 1) / ranks;
}

// What `from` ranks in lockstep take of epoch `epoch` (each `taken` samples from the epoch's start),
// then what `to` ranks take of the rest of that epoch after restoring rank 0's saved state (JSON, as
// the manifest carries it), checked against the rule: the epoch's positions [0, G) by the old ranks,
// [G, G + k·M) by the new ones (k = each new rank's share of the N − G left), wrapping to the epoch's
// first positions for padding; with drop_last the last (N − G) mod M positions are left out. Then
// each new rank's next epoch must be a plain one.
void checkReshard(
    std::uint64_t size, std::uint64_t from, std::uint64_t to, bool dropLast, std::uint64_t taken)
{
    const std::uint64_t seed = 31;
    const std::uint64_t epoch = 2;
    SCOPED_TRACE("size " + std::to_string(size) + ", " + std::to_string(from) + " -> " + std::to_string(to)
        + " ranks, drop_last " + std::to_string(dropLast) + ", " + std::to_string(taken) + " taken per rank");
    std::map<std::uint64_t, int> visits; // index -> times seen in the epoch
    std::vector<SamplerState> saved;
    for (std::uint64_t rank = 0; rank < from; ++rank) {
        ResumableSampler old(size, seed, from, rank, dropLast);
        old.seek(epoch, 0);
        for (std::uint64_t i = 0; i < taken; ++i)
            ++visits[old.next()];
        saved.push_back(nlohmann::json(old.state()).get<SamplerState>());
    }
    const bool boundary = taken == share(size, from, dropLast);
    const std::uint64_t consumed = boundary ? 0 : taken * from;
    EXPECT_EQ(consumedPositions(saved[0]), consumed);
    const std::uint64_t left = size - consumed;
    const std::uint64_t each = share(left, to, dropLast);
    std::uint64_t newVisits = 0;
    for (std::uint64_t rank = 0; rank < to; ++rank) {
        ResumableSampler resumed(size, seed, to, rank, dropLast);
        resumed.resume(saved[0]); // what a data-parallel restore on another world size hands every rank
        ResumableSampler fromAll(size, seed, to, rank, dropLast);
        fromAll.resume(saved); // every old rank's state: the same, checked for lockstep
        EXPECT_EQ(nlohmann::json(fromAll.state()), nlohmann::json(resumed.state()));
        if (boundary) {
            // The old ranks finished the epoch: the new ones start the next one from its beginning.
            EXPECT_EQ(resumed.epoch(), epoch + 1);
            EXPECT_EQ(resumed.position(), 0u);
            EXPECT_EQ(resumed.offset(), 0u);
            continue;
        }
        // An emptied epoch (drop_last, fewer positions left than ranks) moves on at once.
        EXPECT_EQ(resumed.epoch(), each == 0 ? epoch + 1 : epoch);
        EXPECT_EQ(resumed.samplesInEpoch(epoch), each == 0 ? resumed.samplesPerEpoch() : each);
        // Saved and restored again mid-way (same world), through JSON: the same continuation.
        for (std::uint64_t i = 0; i < each; ++i) {
            if (i == each / 2) {
                ResumableSampler again(size, seed, to, rank, dropLast);
                again.resume(nlohmann::json(resumed.state()).get<SamplerState>());
                EXPECT_EQ(nlohmann::json(again.state()), nlohmann::json(resumed.state()));
                EXPECT_EQ(again.indexAt(epoch, i), resumed.indexAt(epoch, i));
            }
            ++visits[resumed.next()];
            ++newVisits;
        }
        EXPECT_EQ(resumed.epoch(), epoch + 1);
        EXPECT_EQ(resumed.position(), 0u);
        EXPECT_EQ(resumed.offset(), 0u);
        // The next epoch is a plain one of this world.
        ResumableSampler plain(size, seed, to, rank, dropLast);
        plain.seek(epoch + 1, 0);
        for (std::uint64_t i = 0; i < plain.samplesPerEpoch(); ++i)
            ASSERT_EQ(resumed.next(), plain.next());
    }
    if (boundary)
        return;
    ASSERT_EQ(newVisits, each * to);
    const std::uint64_t total = consumed + each * to;
    // Padding: positions [N, total) wrap to the epoch's first total − N positions, seen twice.
    const std::uint64_t twice = total > size ? total - size : 0;
    // Drop: positions [total, N) are nobody's.
    const std::uint64_t dropped = total < size ? size - total : 0;
    EXPECT_EQ(dropped, dropLast ? left % to : 0);
    EXPECT_TRUE(dropLast || twice < to);
    for (std::uint64_t position = 0; position < size; ++position) {
        const std::uint64_t index = permutedIndex(position, size, seed, epoch);
        const int expected = position < twice ? 2 : position >= size - dropped ? 0 : 1;
        EXPECT_EQ(visits.count(index) ? visits[index] : 0, expected)
            << "index " << index << " at position " << position;
    }
}

} // namespace

TEST(ResumableSampler, ReshardsAnEpochOntoAnotherWorldSize)
{
    const std::pair<std::uint64_t, std::uint64_t> worlds[] = { { 4, 2 }, { 2, 4 }, { 3, 2 }, { 2, 3 } };
    for (const std::uint64_t size : { 48ull, 53ull, 101ull }) {
        for (const auto& [from, to] : worlds) {
            for (const bool dropLast : { false, true }) {
                const std::uint64_t perRank = share(size, from, dropLast);
                // The epoch's start, every cut in its middle, its last sample, and its end (a boundary).
                for (std::uint64_t taken = 0; taken <= perRank; ++taken)
                    checkReshard(size, from, to, dropLast, taken);
            }
        }
    }
}

TEST(ResumableSampler, ReshardsAgainBeforeTheEpochEnds)
{
    // 4 ranks take 5 samples each of 53, 2 ranks take 7 more each, then 3 ranks finish the epoch:
    // every index once, but for the padding's wrap to the epoch's first positions.
    const std::uint64_t size = 53;
    std::map<std::uint64_t, int> visits;
    SamplerState state;
    for (std::uint64_t rank = 0; rank < 4; ++rank) {
        ResumableSampler sampler(size, 8, 4, rank);
        for (int i = 0; i < 5; ++i)
            ++visits[sampler.next()];
        state = sampler.state();
    }
    SamplerState second;
    for (std::uint64_t rank = 0; rank < 2; ++rank) {
        ResumableSampler sampler(size, 8, 2, rank);
        sampler.resume(state);
        EXPECT_EQ(sampler.offset(), 20u);
        for (int i = 0; i < 7; ++i)
            ++visits[sampler.next()];
        second = nlohmann::json(sampler.state()).get<SamplerState>();
    }
    EXPECT_EQ(consumedPositions(second), 34u);
    std::uint64_t drawn = 0;
    for (std::uint64_t rank = 0; rank < 3; ++rank) {
        ResumableSampler sampler(size, 8, 3, rank);
        sampler.resume(second);
        EXPECT_EQ(sampler.offset(), 34u);
        EXPECT_EQ(sampler.samplesInEpoch(0), 7u); // ceil(19 / 3)
        while (sampler.epoch() == 0) {
            ++visits[sampler.next()];
            ++drawn;
        }
    }
    EXPECT_EQ(drawn, 21u);
    // 34 + 21 = 55 positions: the epoch's first two indices twice, every other once.
    for (std::uint64_t position = 0; position < size; ++position)
        EXPECT_EQ(visits[permutedIndex(position, size, 8, 0)], position < 2 ? 2 : 1) << position;
}

TEST(ResumableSampler, RefusesStatesItCannotMap)
{
    ResumableSampler mine(50, 4, 2, 1);
    const SamplerState other = ResumableSampler(50, 5, 4, 0).state();
    EXPECT_THROW(mine.resume(other), std::invalid_argument); // seed
    EXPECT_THROW(mine.resume(ResumableSampler(51, 4, 4, 0).state()), std::invalid_argument); // size
    EXPECT_THROW(
        mine.resume(ResumableSampler(50, 4, 4, 0, true).state()), std::invalid_argument); // drop_last
    // Ranks not in lockstep: their consumed part of the epoch is not one prefix of its order.
    std::vector<SamplerState> states;
    for (std::uint64_t rank = 0; rank < 4; ++rank) {
        ResumableSampler sampler(50, 4, 4, rank);
        for (std::uint64_t i = 0; i < 3 + (rank == 2 ? 1 : 0); ++i)
            sampler.next();
        states.push_back(sampler.state());
    }
    try {
        mine.resume(states);
        FAIL() << "ranks out of lockstep were accepted";
    } catch (const std::invalid_argument& error) {
        EXPECT_NE(std::string(error.what()).find("not in lockstep"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("rank 2 of 4 at epoch 0 position 4"), std::string::npos)
            << error.what();
    }
    states[2] = states[1];
    EXPECT_THROW(mine.resume(states), std::invalid_argument); // rank 1 twice
    EXPECT_THROW(mine.resume(std::span<const SamplerState>()), std::invalid_argument);
    // Impossible states: an offset outside the epoch, a position past the resharded epoch's share.
    SamplerState bad = ResumableSampler(50, 4, 4, 0).state();
    bad.offset = 50;
    EXPECT_THROW(mine.resume(bad), std::invalid_argument);
    bad.offset = 40;
    bad.position = 4; // ceil(10 / 4) = 3 is the most
    EXPECT_THROW(mine.resume(bad), std::invalid_argument);
    // A refused state leaves the sampler as it was.
    EXPECT_EQ(nlohmann::json(mine.state()), nlohmann::json(ResumableSampler(50, 4, 2, 1).state()));
    // seek() starts the epoch from its beginning: a reshard's offset no longer applies.
    bad.position = 1;
    mine.resume(bad);
    EXPECT_EQ(mine.offset(), 44u);
    mine.seek(mine.epoch(), 0);
    EXPECT_EQ(mine.offset(), 0u);
    EXPECT_EQ(mine.samplesInEpoch(mine.epoch()), 25u);
}

TEST(SamplerCApi, MatchesTheCppSampler)
{
    baton_sampler* sampler = baton_sampler_create(1000, 11, 4, 1, 0);
    ASSERT_NE(sampler, nullptr);
    ResumableSampler reference(1000, 11, 4, 1);
    std::vector<std::uint64_t> batch(300);
    ASSERT_EQ(baton_sampler_next_many(sampler, batch.data(), batch.size()), 0);
    for (std::uint64_t index : batch)
        EXPECT_EQ(index, reference.next());
    EXPECT_EQ(baton_sampler_epoch(sampler), 1u);
    EXPECT_EQ(baton_sampler_position(sampler), 50u);

    const size_t length = baton_sampler_state_json(sampler, nullptr, 0);
    std::string text(length + 1, '\0');
    ASSERT_EQ(baton_sampler_state_json(sampler, text.data(), text.size()), length);
    baton_sampler* resumed = baton_sampler_from_json(text.c_str());
    ASSERT_NE(resumed, nullptr) << baton_sampler_last_error();
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    for (int i = 0; i < 500; ++i) {
        ASSERT_EQ(baton_sampler_next(sampler, &a), 0);
        ASSERT_EQ(baton_sampler_next(resumed, &b), 0);
        ASSERT_EQ(a, b);
    }
    EXPECT_EQ(baton_sampler_index_at(sampler, 0, 1000, &a), -1);
    EXPECT_NE(std::string(baton_sampler_last_error()).find("past the epoch"), std::string::npos);
    EXPECT_EQ(baton_sampler_seek(sampler, 9, 7), 0);
    EXPECT_EQ(baton_sampler_epoch(sampler), 9u);
    baton_sampler_destroy(sampler);
    baton_sampler_destroy(resumed);

    EXPECT_EQ(baton_sampler_create(10, 1, 2, 5, 0), nullptr);
    EXPECT_NE(std::string(baton_sampler_last_error()).find("rank"), std::string::npos);
    EXPECT_EQ(baton_sampler_from_json("{not json"), nullptr);

    // Resuming a 4-rank state on 2 ranks through C matches the C++ sampler.
    ResumableSampler four(1000, 11, 4, 0);
    for (int i = 0; i < 30; ++i)
        four.next();
    const std::string saved = nlohmann::json(four.state()).dump();
    baton_sampler* two = baton_sampler_create(1000, 11, 2, 1, 0);
    ASSERT_EQ(baton_sampler_resume(two, saved.c_str()), 0) << baton_sampler_last_error();
    ResumableSampler twoCpp(1000, 11, 2, 1);
    twoCpp.resume(four.state());
    EXPECT_EQ(baton_sampler_samples_in_epoch(two), twoCpp.samplesInEpoch(0));
    EXPECT_EQ(baton_sampler_samples_in_epoch(two), 440u); // (1000 − 120) / 2
    for (int i = 0; i < 500; ++i) {
        ASSERT_EQ(baton_sampler_next(two, &a), 0);
        ASSERT_EQ(a, twoCpp.next());
    }
    EXPECT_EQ(
        baton_sampler_resume(two, R"({"seed":12,"epoch":0,"position":0,"size":1000,"ranks":4,"rank":0})"),
        -1);
    EXPECT_NE(std::string(baton_sampler_last_error()).find("seed 12"), std::string::npos);
    EXPECT_EQ(baton_sampler_resume(two, nullptr), -1);
    baton_sampler_destroy(two);
    EXPECT_EQ(baton_sampler_from_json(nullptr), nullptr);
    EXPECT_EQ(samplerFromC(), 0);
}
