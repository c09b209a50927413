// Any single altered byte of a data file or manifest is detected and restore falls back to the previous
// checkpoint, saying why.
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "ckpt_test_util.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;

namespace {

class Corruption : public ::testing::Test {
protected:
    void build(std::vector<std::size_t> sizes)
    {
        sizes_ = std::move(sizes);
        state_.assign(sizes_.size(), {});
        Options options;
        options.chainDir = dir_.path();
        options.log = [](std::string_view) {};
        Checkpointer ckpt(options);
        for (std::size_t i = 0; i < sizes_.size(); ++i) {
            state_[i].resize(sizes_[i]);
            ckpt.registerRegion("r" + std::to_string(i), state_[i].data(), sizes_[i]);
        }
        for (std::uint64_t it : { 1, 2 }) {
            for (std::size_t i = 0; i < sizes_.size(); ++i)
                fillPattern(state_[i].data(), sizes_[i], i, it);
            ckpt.setBlob("note", "iteration " + std::to_string(it));
            ckpt.setManifestField("tuning", { { "interval", it } });
            ASSERT_TRUE(ckpt.checkpointNow(it));
        }
        reader_ = std::make_unique<Checkpointer>(options);
        for (std::size_t i = 0; i < sizes_.size(); ++i)
            reader_->registerRegion("r" + std::to_string(i), state_[i].data(), sizes_[i]);
        newest_ = dir_.path() / checkpointDirName(2);
    }

    static std::string readAll(const std::filesystem::path& path)
    {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }
    static void writeAll(const std::filesystem::path& path, const std::string& bytes)
    {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    }

    // Restore must skip the newest checkpoint and bring back iteration 1 exactly.
    void expectFallback(const std::string& what)
    {
        auto result = reader_->restore();
        ASSERT_TRUE(result.restored) << what;
        ASSERT_EQ(result.iteration, 1u) << what << ": the corruption went unnoticed";
        ASSERT_EQ(result.fallbacks.size(), 1u) << what;
        EXPECT_EQ(result.fallbacks[0].dir, newest_);
        EXPECT_FALSE(result.fallbacks[0].reason.empty());
        for (std::size_t i = 0; i < sizes_.size(); ++i)
            ASSERT_TRUE(matchesPattern(state_[i].data(), sizes_[i], i, 1)) << what;
    }

    void corruptEachPosition(const std::filesystem::path& file, const std::vector<std::size_t>& positions)
    {
        std::string original = readAll(file);
        std::mt19937 rng(7);
        for (std::size_t position : positions) {
            std::string damaged = original;
            damaged[position] = static_cast<char>(damaged[position] ^ (1 + rng() % 255));
            writeAll(file, damaged);
            expectFallback(file.filename().string() + " byte " + std::to_string(position));
            if (HasFatalFailure())
                return;
        }
        writeAll(file, original);
        auto result = reader_->restore();
        EXPECT_EQ(result.iteration, 2u) << "the undamaged checkpoint no longer restores";
    }

    static std::vector<std::size_t> allPositions(std::size_t size)
    {
        std::vector<std::size_t> positions(size);
        for (std::size_t i = 0; i < size; ++i)
            positions[i] = i;
        return positions;
    }

    baton::test::TempDir dir_ { "ckpt-corrupt" };
    std::vector<std::size_t> sizes_;
    std::vector<std::vector<std::byte>> state_;
    std::unique_ptr<Checkpointer> reader_;
    std::filesystem::path newest_;
};

TEST_F(Corruption, EveryByteOfASmallDataFile)
{
    // Unaligned sizes leave padding between regions: padding bytes are checked too.
    build({ 100, 3001, 5, 0, 700 });
    auto file = newest_ / kDataFileName;
    corruptEachPosition(file, allPositions(std::filesystem::file_size(file)));
}

TEST_F(Corruption, EveryByteOfTheManifest)
{
    build({ 100, 3001, 5 });
    auto file = newest_ / kManifestName;
    corruptEachPosition(file, allPositions(std::filesystem::file_size(file)));
}

TEST_F(Corruption, SampledBytesOfALargeDataFile)
{
    build({ (8 << 20) + 17, 4096 });
    auto file = newest_ / kDataFileName;
    std::size_t size = std::filesystem::file_size(file);
    std::mt19937_64 rng(3);
    std::vector<std::size_t> positions = { 0, 1, 4095, 4096, (8 << 20) + 16, (8 << 20) + 17, size - 1 };
    for (int i = 0; i < 60; ++i)
        positions.push_back(rng() % size);
    corruptEachPosition(file, positions);
}

TEST_F(Corruption, TruncatedExtendedAndMissingFiles)
{
    build({ 5000, 20 });
    auto data = newest_ / kDataFileName;
    std::string original = readAll(data);
    writeAll(data, original.substr(0, original.size() - 1));
    expectFallback("truncated data file");
    writeAll(data, original + '\0');
    expectFallback("extended data file");
    std::filesystem::remove(data);
    expectFallback("missing data file");
    writeAll(data, original);

    auto manifest = newest_ / kManifestName;
    std::string text = readAll(manifest);
    writeAll(manifest, text.substr(0, text.size() / 2));
    expectFallback("torn manifest");
    writeAll(manifest, "");
    expectFallback("empty manifest");
    writeAll(manifest, text);
    EXPECT_EQ(reader_->restore().iteration, 2u);
}

TEST_F(Corruption, BothDamagedMeansNothingToRestore)
{
    build({ 1000 });
    for (std::uint64_t it : { 1, 2 }) {
        auto file = dir_.path() / checkpointDirName(it) / kDataFileName;
        std::string bytes = readAll(file);
        bytes[10] = static_cast<char>(bytes[10] ^ 1);
        writeAll(file, bytes);
    }
    auto result = reader_->restore();
    EXPECT_FALSE(result.restored);
    EXPECT_EQ(result.fallbacks.size(), 2u);
    EXPECT_FALSE(result.regionsOverwritten);
    auto verdict = verifyCheckpoint(newest_);
    EXPECT_FALSE(verdict.ok);
    EXPECT_NE(verdict.reason.find("checksum mismatch in 'r0'"), std::string::npos) << verdict.reason;
}

// Every checkpoint is damaged in its last bytes (the blob after all regions): the regions must not receive
// a byte of it, so that a caller who falls back to a fresh start trains from its own initial state.
TEST_F(Corruption, EveryCheckpointCorruptedLeavesRegionsUntouched)
{
    build({ 3 << 20, 1000, (1 << 20) + 7, 300 });
    for (std::uint64_t it : { 1, 2 }) {
        auto file = dir_.path() / checkpointDirName(it) / kDataFileName;
        std::string bytes = readAll(file);
        bytes[bytes.size() - 1] = static_cast<char>(bytes[bytes.size() - 1] ^ 0x40);
        writeAll(file, bytes);
    }
    for (std::size_t i = 0; i < sizes_.size(); ++i)
        fillPattern(state_[i].data(), sizes_[i], 100 + i, 0); // the caller's own initial state
    auto result = reader_->restore();
    EXPECT_FALSE(result.restored);
    ASSERT_EQ(result.fallbacks.size(), 2u);
    for (const auto& fallback : result.fallbacks)
        EXPECT_NE(fallback.reason.find("checksum mismatch in 'note'"), std::string::npos) << fallback.reason;
    EXPECT_FALSE(result.regionsOverwritten);
    for (std::size_t i = 0; i < sizes_.size(); ++i)
        EXPECT_TRUE(matchesPattern(state_[i].data(), sizes_[i], 100 + i, 0))
            << "region r" << i << " was overwritten by a checkpoint that failed to verify";
}

// A manifest (intact, with a valid checksum) whose sizes do not fit its data file is skipped with the
// reason before anything is allocated for it: a total of 1 PiB would fail any allocation.
TEST_F(Corruption, AbsurdSizesAreSkippedBeforeAnyAllocation)
{
    build({ 1000, 5000 });
    auto path = newest_ / kManifestName;
    const std::string original = readAll(path);
    auto rewrite = [&](auto&& change) {
        auto manifest = parseManifest(original);
        change(manifest.document);
        writeAll(path, renderManifest(manifest.document));
    };
    const std::uint64_t huge = std::uint64_t(1) << 50;

    // total_bytes and the last entry (the blob) grow together: the layout is consistent, the file is not.
    rewrite([&](nlohmann::json& doc) {
        auto& last = doc["blobs"][0];
        last["size"] = huge - last["offset"].get<std::uint64_t>();
        doc["total_bytes"] = huge;
    });
    expectFallback("total_bytes of 1 PiB");
    EXPECT_NE(reader_->restore().fallbacks.at(0).reason.find("the manifest says " + std::to_string(huge)),
        std::string::npos);

    // A region larger than the data file, total_bytes unchanged.
    rewrite([&](nlohmann::json& doc) { doc["regions"][0]["size"] = huge; });
    expectFallback("region of 1 PiB");

    // total_bytes alone beyond the file.
    rewrite(
        [&](nlohmann::json& doc) { doc["total_bytes"] = doc["total_bytes"].get<std::uint64_t>() + 4096; });
    expectFallback("total_bytes beyond the file");

    writeAll(path, original);
    EXPECT_EQ(reader_->restore().iteration, 2u);
}

} // namespace
