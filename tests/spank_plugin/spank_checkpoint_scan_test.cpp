// The plugin's scan of a chain directory for the newest usable checkpoint, against hostile manifests.
#include "spank_core_support.hpp"

#include "spank_plugin/checkpoint_scan.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

namespace {

using namespace baton::spank;
using namespace baton::spank::test;

TEST(CheckpointScan, NewestUsableCommittedCheckpointWins)
{
    TempDir temp;
    const fs::path chain = temp.path();
    auto commit = [&](const std::string& name, const std::string& text) {
        fs::create_directory(chain / name);
        writeText(chain / name / "manifest.json", text);
    };
    EXPECT_FALSE(newestCheckpoint(openDir(chain).get()).has_value());
    commit("ckpt-000000000100", manifest(100));
    commit("ckpt-000000000200", manifest(200));
    commit("ckpt-000000000300", "{\"format_version\": 1, \"iteration\": "); // torn
    commit("ckpt-000000000400", manifest(400, 3)); // from a newer format
    fs::create_directory(chain / "ckpt-000000000500"); // not committed
    fs::create_directory(chain / "ckpt-000000000600");
    fs::create_symlink(
        chain / "ckpt-000000000100" / "manifest.json", chain / "ckpt-000000000600" / "manifest.json");
    ASSERT_EQ(::mkfifo((chain / "ckpt-000000000700").c_str(), 0600), 0);
    fs::create_directory(chain / "ckpt-000000000800");
    ASSERT_EQ(::mkfifo((chain / "ckpt-000000000800" / "manifest.json").c_str(), 0600), 0);
    commit("ckpt-tmp-000000000900", manifest(900));

    const auto newest = newestCheckpoint(openDir(chain).get());
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->name, "ckpt-000000000200");
    EXPECT_EQ(newest->iteration, 200);
    EXPECT_DOUBLE_EQ(newest->createdUnix, 1700000000.5);
    EXPECT_EQ(newest->totalBytes, 2000);
    EXPECT_EQ(newest->tuning["interval"], 7);
}

void commitManifest(const fs::path& chain, const std::string& name, const std::string& text)
{
    fs::create_directory(chain / name);
    writeText(chain / name / "manifest.json", text);
}

std::string checkpointName(long long iteration)
{
    char name[32];
    std::snprintf(name, sizeof name, "ckpt-%012lld", iteration);
    return name;
}

TEST(CheckpointScan, DeeplyNestedTuningIsSkippedWithoutRecursion)
{
    TempDir temp;
    commitManifest(temp.path(), checkpointName(100), manifest(100));
    // 100000 levels: a recursive parser, copy or dump would overflow the stack of slurmstepd's thread.
    auto deep = nlohmann::json::parse(manifest(200));
    deep.erase("tuning");
    std::string text = deep.dump();
    text.pop_back(); // the closing brace
    text += ",\"tuning\":{\"interval\":";
    for (int i = 0; i < 50000; ++i) {
        text += "[{\"a\":";
    }
    text += "1";
    for (int i = 0; i < 50000; ++i) {
        text += "}]";
    }
    text += "}}";
    commitManifest(temp.path(), checkpointName(200), text);
    const auto newest = newestCheckpoint(openDir(temp.path()).get());
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->name, checkpointName(100));
    EXPECT_THROW(summarizeManifest("x", text), std::exception);

    // Nesting within the limit is fine; the tuning object keeps only its known numeric keys.
    auto nested = nlohmann::json::parse(manifest(300));
    nested["extra"] = nlohmann::json::parse(std::string(20, '[') + std::string(20, ']'));
    commitManifest(temp.path(), checkpointName(300), nested.dump());
    EXPECT_EQ(newestCheckpoint(openDir(temp.path()).get())->name, checkpointName(300));
}

TEST(CheckpointScan, OversizedManifestIsSkipped)
{
    TempDir temp;
    commitManifest(temp.path(), checkpointName(100), manifest(100));
    auto big = nlohmann::json::parse(manifest(200));
    big["padding"] = std::string(1u << 20, 'x');
    commitManifest(temp.path(), checkpointName(200), big.dump());
    const auto newest = newestCheckpoint(openDir(temp.path()).get());
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->name, checkpointName(100));
    // A larger limit reads it.
    ScanLimits generous;
    generous.maxManifestBytes = 2u << 20;
    EXPECT_EQ(newestCheckpoint(openDir(temp.path()).get(), generous)->name, checkpointName(200));
}

TEST(CheckpointScan, StopsAfterTheNewestCandidates)
{
    TempDir temp;
    commitManifest(temp.path(), checkpointName(1), manifest(1));
    const ScanLimits limits;
    // As many damaged checkpoints as the limit allows: the valid one behind them is still found.
    for (std::size_t i = 0; i + 1 < limits.maxCandidates; ++i) {
        commitManifest(temp.path(), checkpointName(100 + static_cast<long long>(i)), "{\"torn\":");
    }
    EXPECT_EQ(newestCheckpoint(openDir(temp.path()).get())->name, checkpointName(1));
    // One more damaged one: the scan gives up within its bound instead of reading every manifest.
    for (std::size_t i = limits.maxCandidates; i < 4 * limits.maxCandidates; ++i) {
        commitManifest(temp.path(), checkpointName(100 + static_cast<long long>(i)), "{\"torn\":");
    }
    EXPECT_FALSE(newestCheckpoint(openDir(temp.path()).get()).has_value());
    // Names that only look like checkpoints are not candidates.
    for (const char* name : { "ckpt-", "ckpt-12a", "ckpt--1", "ckpt-5", "ckpt-0000000000005",
             "ckpt-99999999999999999999", "ckpt-000000000005x", "xckpt-5" }) {
        commitManifest(temp.path(), name, manifest(5));
    }
    ScanLimits one;
    one.maxCandidates = 1;
    commitManifest(temp.path(), checkpointName(5000), manifest(5000));
    EXPECT_EQ(newestCheckpoint(openDir(temp.path()).get(), one)->name, checkpointName(5000));
    one.timeLimit = std::chrono::milliseconds(0);
    EXPECT_FALSE(newestCheckpoint(openDir(temp.path()).get(), one).has_value());
}

TEST(CheckpointScan, ManifestHandoverFieldsAndTuningFilter)
{
    auto full = nlohmann::json::parse(manifest(100));
    full["final"] = true;
    full["training_done"] = true;
    full["seq"] = 3;
    full["job_id"] = 4711;
    full["tuning"] = { { "interval", 7 }, { "iteration_seconds", 0.5 }, { "snapshot_seconds", "1e999" },
        { "persist_seconds", "2" }, { "overhead_percent", 4.5 }, { "stall_seconds", nullptr },
        { "command", "rm -rf /" }, { "nested", { { "interval", 1 } } } };
    const auto summary = summarizeManifest("ckpt-000000000100", full.dump());
    EXPECT_TRUE(summary.final);
    EXPECT_TRUE(summary.trainingDone);
    EXPECT_EQ(summary.chainSeq, 3);
    EXPECT_EQ(summary.jobId, 4711);
    EXPECT_EQ(summary.tuning,
        (nlohmann::json { { "interval", 7 }, { "iteration_seconds", 0.5 }, { "overhead_percent", 4.5 } }));

    // Absent or mistyped: false and null, and the checkpoint is still usable.
    auto plain = nlohmann::json::parse(manifest(100));
    plain["final"] = "yes";
    plain["job_id"] = "4711";
    plain["tuning"] = "fast";
    const auto older = summarizeManifest("ckpt-000000000100", plain.dump());
    EXPECT_FALSE(older.final);
    EXPECT_FALSE(older.trainingDone);
    EXPECT_FALSE(older.chainSeq.has_value());
    EXPECT_FALSE(older.jobId.has_value());
    EXPECT_TRUE(older.tuning.is_null());
    EXPECT_EQ(filterTuning({ { "interval", INFINITY }, { "stall_seconds", NAN }, { "persist_seconds", 2 } }),
        (nlohmann::json { { "persist_seconds", 2 } }));
}

// The numbers an event forwards are range-checked where the plugin reads them (the contract's ranges):
// a manifest with a value a database column or conversion cannot take is no checkpoint, and the scan
// reports why it skipped it and falls back to the previous one.
TEST(CheckpointScan, HostileNumbersMakeAManifestUnusable)
{
    // `key` replaced by the raw JSON text `value`.
    const auto withRaw = [](const char* key, const std::string& value) {
        auto document = nlohmann::json::parse(manifest(200));
        document[key] = "@RAW@";
        std::string text = document.dump();
        text.replace(text.find("\"@RAW@\""), 7, value);
        return text;
    };
    const std::vector<std::pair<const char*, std::string>> hostile {
        { "iteration", "1e300" },
        { "iteration", "9223372036854775807" },
        { "iteration", "18446744073709551615" },
        { "iteration", "9007199254740993" },
        { "iteration", "-1" },
        { "iteration", "1.5" },
        { "iteration", "\"NaN\"" },
        { "iteration", "\"200\"" },
        { "iteration", "null" },
        { "iteration", "true" },
        { "iteration", "[200]" },
        { "created_unix", "1e300" },
        { "created_unix", "1e400" },
        { "created_unix", "-1" },
        { "created_unix", "253402300800" },
        { "created_unix", "9223372036854775807" },
        { "created_unix", "\"NaN\"" },
        { "created_unix", "\"Infinity\"" },
        { "created_unix", "{}" },
        { "total_bytes", "9223372036854775807" },
        { "total_bytes", "1e300" },
        { "total_bytes", "-5" },
        { "total_bytes", "\"2000\"" },
        { "total_bytes", "false" },
    };
    for (const auto& [key, value] : hostile) {
        const std::string text = withRaw(key, value);
        std::string message;
        try {
            summarizeManifest(checkpointName(200), text);
            message = "accepted";
        } catch (const std::exception& e) {
            message = e.what();
        }
        EXPECT_NE(message, "accepted") << key << " = " << value;
    }
    // The edges of the ranges are still checkpoints.
    auto edge = nlohmann::json::parse(manifest(200));
    edge["iteration"] = std::int64_t { 1 } << 53;
    edge["total_bytes"] = 0;
    edge["created_unix"] = 253402300799;
    const auto summary = summarizeManifest(checkpointName(200), edge.dump());
    EXPECT_EQ(summary.iteration, std::int64_t { 1 } << 53);
    EXPECT_EQ(summary.totalBytes, 0);
    EXPECT_DOUBLE_EQ(summary.createdUnix, 253402300799.0);
    // seq and job_id are forwarded too: outside 0..2^53 they are dropped.
    auto ids = nlohmann::json::parse(manifest(200));
    ids["seq"] = -3;
    ids["job_id"] = 18446744073709551615ull;
    const auto dropped = summarizeManifest(checkpointName(200), ids.dump());
    EXPECT_FALSE(dropped.chainSeq.has_value());
    EXPECT_FALSE(dropped.jobId.has_value());

    // In a chain: the hostile newest manifest is skipped with its reason, the previous one reported.
    TempDir temp;
    commitManifest(temp.path(), checkpointName(100), manifest(100));
    commitManifest(temp.path(), checkpointName(200), withRaw("created_unix", "1e300"));
    commitManifest(temp.path(), checkpointName(300), withRaw("iteration", "9223372036854775807"));
    std::vector<std::string> skipped;
    const auto newest = newestCheckpoint(openDir(temp.path()).get(), {}, &skipped);
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->name, checkpointName(100));
    ASSERT_EQ(skipped.size(), 2u);
    EXPECT_THAT(skipped[0], HasSubstr(checkpointName(300) + ": manifest iteration out of range"));
    EXPECT_THAT(skipped[1], HasSubstr(checkpointName(200) + ": manifest created_unix out of range"));
    // Without a list to fill, the scan is the same.
    EXPECT_EQ(newestCheckpoint(openDir(temp.path()).get())->name, checkpointName(100));
}

// A multi-rank checkpoint (format version 2) is usable and reported with its world size and the count
// of its regions per layout; only the known layout names are counted.
TEST(CheckpointScan, MultiRankManifestReportsWorldSizeAndLayouts)
{
    auto sharded = nlohmann::json::parse(manifest(100, 2));
    sharded["world_size"] = 4;
    sharded["regions"] = nlohmann::json::array(
        { { { "name", "w" }, { "layout", "replicated" } }, { { "name", "w" }, { "layout", "replicated" } },
            { { "name", "opt" }, { "layout", "sharded" } }, { { "name", "rng" }, { "layout", "rank" } },
            { { "name", "x" }, { "layout", "$(reboot)" } }, { { "name", "y" } }, 7 });
    const auto summary = summarizeManifest("ckpt-000000000100", sharded.dump());
    EXPECT_EQ(summary.worldSize, 4);
    EXPECT_EQ(
        summary.regionLayouts, (nlohmann::json { { "replicated", 2 }, { "sharded", 1 }, { "rank", 1 } }));

    const auto single = summarizeManifest("ckpt-000000000100", manifest(100));
    EXPECT_EQ(single.worldSize, 1);
    EXPECT_TRUE(single.regionLayouts.is_null());

    for (const nlohmann::json& bad : { nlohmann::json(0), nlohmann::json(-2), nlohmann::json("4"),
             nlohmann::json(std::int64_t { 1 } << 40) }) {
        sharded["world_size"] = bad;
        EXPECT_THROW(summarizeManifest("x", sharded.dump()), std::exception) << bad;
    }
    EXPECT_THROW(summarizeManifest("x", manifest(100, 3)), std::exception) << "a newer format";
}

} // namespace
