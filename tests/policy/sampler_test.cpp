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
    EXPECT_EQ(baton_sampler_from_json(nullptr), nullptr);
    EXPECT_EQ(samplerFromC(), 0);
}
