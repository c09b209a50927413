// The BATON_* contract seen from both sides at once: whatever the plugin writes or reads, the checkpointer
// accepts the same way (common/baton_contract.hpp, docs/contracts.md). The plugin's parsers and its
// chain scan against libbaton-ckpt's environment parsing and chain listing.
#include "spank_plugin/checkpoint_scan.hpp"
#include "spank_plugin/unique_fd.hpp"
#include "spank_plugin/values.hpp"

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/deadline.hpp"
#include "baton/ckpt/error.hpp"
#include "baton/ckpt/manifest.hpp"
#include "baton/ckpt/options.hpp"
#include "baton/ckpt/policy.hpp"
#include "common/baton_contract.hpp"

#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

bool accepts(const std::function<void()>& parse)
{
    try {
        parse();
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

// The checkpointer's reading of one variable, through its own environment parsing.
bool checkpointerAccepts(const char* name, const std::string& value)
{
    ::setenv("BATON_CHAIN_DIR", "/tmp/contract-chain", 1);
    ::setenv(name, value.c_str(), 1);
    bool ok = accepts([] {
        baton::ckpt::Options::fromEnvironment();
        baton::ckpt::applyEnvironment({});
    });
    ::unsetenv(name);
    ::unsetenv("BATON_CHAIN_DIR");
    return ok;
}

struct Case {
    const char* variable;
    std::function<void(std::string_view)> pluginParse;
    std::vector<std::string> values;
};

TEST(Contract, PluginAndCheckpointerAcceptTheSameValues)
{
    using namespace baton::spank;
    const std::vector<Case> cases = {
        { "BATON_KEEP", [](std::string_view v) { parseKeepCount(v); },
            { "0", "1", "2", "999", "1000", "1001", "5000", "1000000", "-1", "two" } },
        { "BATON_OVERHEAD", [](std::string_view v) { parseOverheadPercent(v); },
            { "0", "0.01", "5", "7.5", "99.99", "100", "100.5", "-3", "lots" } },
        { "BATON_DEADLINE_MARGIN", [](std::string_view v) { parseMarginSeconds(v); },
            { "0", "1", "60", "86400", "86401", "1000000", "-1" } },
        { "BATON_HANDOVER_WAIT", [](std::string_view v) { parseHandoverWaitSeconds(v); },
            { "0", "120", "3600", "3601", "-1" } },
    };
    for (const auto& c : cases) {
        for (const auto& value : c.values) {
            const bool plugin = accepts([&] { c.pluginParse(value); });
            EXPECT_EQ(plugin, checkpointerAccepts(c.variable, value))
                << c.variable << "='" << value << "': the plugin " << (plugin ? "accepts" : "refuses")
                << " it, the checkpointer does the opposite";
        }
    }
    // The values the plugin writes by default are in range on both sides.
    EXPECT_TRUE(checkpointerAccepts("BATON_KEEP", std::to_string(baton::contract::kKeepDefault)));
    EXPECT_TRUE(baton::contract::overheadInRange(baton::contract::kOverheadDefault));
    EXPECT_TRUE(baton::contract::marginInRange(baton::contract::kMarginDefault));
}

TEST(Contract, CheckpointDirectoryNames)
{
    using baton::contract::checkpointDirName;
    using baton::contract::parseCheckpointDirName;
    const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    EXPECT_EQ(checkpointDirName(1200), "ckpt-000000001200");
    EXPECT_EQ(checkpointDirName(max), "ckpt-18446744073709551615");
    for (std::uint64_t it : { std::uint64_t(0), std::uint64_t(7), std::uint64_t(999999999999),
             std::uint64_t(1000000000000), max - 1, max }) {
        EXPECT_EQ(parseCheckpointDirName(checkpointDirName(it)), it) << it;
        EXPECT_EQ(baton::ckpt::parseCheckpointDirName(checkpointDirName(it)), it) << it;
        EXPECT_EQ(baton::ckpt::checkpointDirName(it), checkpointDirName(it));
    }
    // One name per iteration; nothing that overflows or merely looks like one.
    for (const char* bad : { "ckpt-", "ckpt-7", "ckpt-00000000007", "ckpt-0000000000007",
             "ckpt-18446744073709551616", "ckpt-99999999999999999999", "ckpt-000000000000000000001",
             "ckpt-00000000000x", "ckpt--00000000001", "xckpt-000000000001", "ckpt-+00000000001" }) {
        EXPECT_FALSE(parseCheckpointDirName(bad).has_value()) << bad;
        EXPECT_FALSE(baton::ckpt::parseCheckpointDirName(bad).has_value()) << bad;
    }
}

std::string manifestText(std::uint64_t iteration)
{
    return "{\"format_version\": 1, \"iteration\": " + std::to_string(iteration)
        + ", \"epoch\": 0, \"created_unix\": 1700000000, \"total_bytes\": 0, \"regions\": [], \"blobs\": []}";
}

// A chain directory holding names only one side would have taken for checkpoints: both now see the same
// checkpoints, and the plugin reports the one the checkpointer would restore.
TEST(Contract, PluginReportsTheCheckpointTheCheckpointerSees)
{
    baton::test::TempDir dir("contract-chain");
    for (const std::string& name : { baton::contract::checkpointDirName(5), std::string("ckpt-7"),
             std::string("ckpt-0000000000009"), std::string("ckpt-99999999999999999999") }) {
        fs::create_directory(dir.path() / name);
        std::ofstream(dir.path() / name / "manifest.json") << manifestText(name == "ckpt-7" ? 7 : 5);
    }
    std::set<std::uint64_t> library;
    for (const auto& info : baton::ckpt::listCheckpoints(dir.path()))
        library.insert(info.iteration);
    EXPECT_EQ(library, std::set<std::uint64_t> { 5 });

    baton::spank::UniqueFd chain(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto newest = baton::spank::newestCheckpoint(chain.get());
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->name, baton::contract::checkpointDirName(5));
}

// The writer's seq as both sides read it: `seq`, else `restart_count` (manifests of earlier releases).
TEST(Contract, PluginAndCheckpointerReadTheSeqOfOldAndNewManifests)
{
    const auto seqs = [](const nlohmann::json& fields) {
        nlohmann::json document = nlohmann::json::parse(manifestText(5));
        document.update(fields);
        const std::string text = baton::ckpt::renderManifest(document);
        const auto library = baton::ckpt::parseManifest(text).chainSeq;
        const auto plugin = baton::spank::summarizeManifest("ckpt-000000000005", text).chainSeq;
        return std::pair { library ? std::optional<std::int64_t>(*library) : std::nullopt, plugin };
    };
    using Seqs = std::pair<std::optional<std::int64_t>, std::optional<std::int64_t>>;
    EXPECT_EQ(seqs({ { baton::contract::kManifestSeqKey, 3 } }), (Seqs { 3, 3 }));
    EXPECT_EQ(seqs({ { baton::contract::kLegacyManifestSeqKey, 2 } }), (Seqs { 2, 2 }));
    EXPECT_EQ(
        seqs({ { baton::contract::kManifestSeqKey, 4 }, { baton::contract::kLegacyManifestSeqKey, 2 } }),
        (Seqs { 4, 4 }));
    EXPECT_EQ(seqs(nlohmann::json::object()), (Seqs { std::nullopt, std::nullopt }));
}

} // namespace
