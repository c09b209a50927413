// The plugin's Slurm-independent parts: values, plugstack configuration, paths, credentials, chain
// files, events and the HTTP client, against real files, a real HTTP server and real sockets.
#include "spank_plugin/chain_files.hpp"
#include "spank_plugin/checkpoint_scan.hpp"
#include "spank_plugin/config.hpp"
#include "spank_plugin/credentials.hpp"
#include "spank_plugin/event.hpp"
#include "spank_plugin/http_client.hpp"
#include "spank_plugin/paths.hpp"
#include "spank_plugin/values.hpp"

#include "common/munge_credential.hpp"

#include "tests/support/http_sink.hpp"
#include "tests/support/process.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <future>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <set>
#include <sstream>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>

namespace {

using namespace baton::spank;
using baton::test::TempDir;
using testing::HasSubstr;
namespace fs = std::filesystem;

std::string readText(const fs::path& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

void writeText(const fs::path& path, const std::string& text)
{
    std::ofstream(path) << text;
}

std::string messageOf(const std::function<void()>& body)
{
    try {
        body();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "no error";
}

mode_t modeOf(const fs::path& path)
{
    struct stat info { };
    EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
    return info.st_mode & 07777;
}

uid_t ownerOf(const fs::path& path)
{
    struct stat info { };
    EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
    return info.st_uid;
}

UniqueFd openDir(const fs::path& path)
{
    return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

constexpr uid_t nobodyUid = 65534;
constexpr gid_t nobodyGid = 65534;

TEST(Values, ParseOptionValuesAndRejectBadOnes)
{
    EXPECT_DOUBLE_EQ(parseOverheadPercent("7.5"), 7.5);
    for (const char* bad : { "", "abc", "0", "100", "-1", "5%", "nan", "inf" }) {
        EXPECT_THAT(messageOf([&] { parseOverheadPercent(bad); }), HasSubstr("overhead must be")) << bad;
    }
    EXPECT_EQ(parseMarginSeconds("90"), 90);
    for (const char* bad : { "", "-5", "1.5", "86401", "x" }) {
        EXPECT_THAT(messageOf([&] { parseMarginSeconds(bad); }), HasSubstr("margin must be")) << bad;
    }
    EXPECT_EQ(parseTimeoutSeconds("0.25"), std::chrono::milliseconds(250));
    EXPECT_THROW(parseTimeoutSeconds("0"), std::invalid_argument);
    EXPECT_EQ(parseKeepCount("3"), 3);
    EXPECT_THROW(parseKeepCount("0"), std::invalid_argument);
}

TEST(Values, ChainNamesAreSinglePathComponents)
{
    EXPECT_TRUE(isValidChainName("resnet-50_v1.2"));
    for (const char* bad : { "", ".", "..", "../x", "a/b", ".hidden", "-x", "a b", "(null)" }) {
        EXPECT_FALSE(isValidChainName(bad)) << bad;
    }
    EXPECT_FALSE(isValidChainName(std::string(129, 'a')));
    EXPECT_EQ(chainNameFromJobName("my job/1"), "my_job_1");
    EXPECT_EQ(chainNameFromJobName("..x"), "_.x");
    EXPECT_EQ(chainNameFromJobName(""), "job");
    EXPECT_TRUE(isValidChainName(chainNameFromJobName(std::string(300, '/'))));
}

TEST(Config, DefaultsFirstThenKeys)
{
    const PluginConfig defaults = parseConfig({});
    EXPECT_EQ(defaults.chainRoot, "%h/.baton/chains");
    EXPECT_EQ(defaults.url, "");
    EXPECT_DOUBLE_EQ(defaults.overheadPercent, 5);
    EXPECT_EQ(defaults.marginSeconds, 60);
    EXPECT_EQ(defaults.keep, 2);
    EXPECT_EQ(defaults.handoverWaitSeconds, 120);
    EXPECT_EQ(defaults.reportTimeout, std::chrono::milliseconds(2000));
    EXPECT_EQ(defaults.allowedPrefixes, std::vector<std::string> { "%h" });

    const PluginConfig config
        = parseConfig({ "chain_root=/scratch/baton/%u", "url=http://head:8760", "overhead=3", "margin=120",
            "keep=4", "handover_wait=0", "report_timeout=0.5", "allowed_prefixes=/scratch:%h/ckpt" });
    EXPECT_EQ(config.chainRoot, "/scratch/baton/%u");
    EXPECT_EQ(config.url, "http://head:8760");
    EXPECT_DOUBLE_EQ(config.overheadPercent, 3);
    EXPECT_EQ(config.marginSeconds, 120);
    EXPECT_EQ(config.keep, 4);
    EXPECT_EQ(config.handoverWaitSeconds, 0);
    EXPECT_EQ(config.reportTimeout, std::chrono::milliseconds(500));
    EXPECT_EQ(config.allowedPrefixes, (std::vector<std::string> { "/scratch", "%h/ckpt" }));
    EXPECT_TRUE(config.localRoot.empty()); // one level unless the administrator names a node-local root

    const PluginConfig twoLevel = parseConfig({ "local_root=/local/%n/%u", "local_keep=3", "drain_rate=200" });
    EXPECT_EQ(twoLevel.localRoot, "/local/%n/%u");
    EXPECT_EQ(twoLevel.localKeep, 3);
    EXPECT_EQ(twoLevel.drainRateMBps, 200);
    EXPECT_THAT(messageOf([] { parseConfig({ "local_root=local" }); }), HasSubstr("must be an absolute path"));
    EXPECT_THAT(messageOf([] { parseConfig({ "drain_rate=-1" }); }), HasSubstr("drain rate must be"));
    EXPECT_THAT(messageOf([] { parseConfig({ "local_keep=0" }); }), HasSubstr("keep must be"));
    // %n is the node's name, which only the node-local root can depend on.
    EXPECT_THAT(messageOf([] { parseConfig({ "chain_root=/s/%n" }); }), HasSubstr("unknown placeholder"));
}

TEST(Config, UnknownRepeatedOrBadKeysAreClearErrors)
{
    EXPECT_THAT(messageOf([] { parseConfig({ "bogus=1" }); }),
        HasSubstr("plugstack.conf: unknown key 'bogus' (known: chain_root"));
    EXPECT_THAT(messageOf([] {
        parseConfig({ "margin=1", "margin=2" });
    }),
        HasSubstr("key 'margin' given twice"));
    EXPECT_THAT(messageOf([] { parseConfig({ "margin" }); }), HasSubstr("'margin' is not key=value"));
    EXPECT_THAT(
        messageOf([] { parseConfig({ "overhead=0" }); }), HasSubstr("plugstack.conf: overhead must be"));
    EXPECT_THAT(messageOf([] { parseConfig({ "url=https://x" }); }), HasSubstr("must start with http://"));
    EXPECT_EQ(parseConfig({ "handover_wait=3600" }).handoverWaitSeconds, 3600);
    for (const char* bad :
        { "handover_wait=3601", "handover_wait=-1", "handover_wait=1.5", "handover_wait=" }) {
        EXPECT_THAT(
            messageOf([&] { parseConfig({ bad }); }), HasSubstr("plugstack.conf: handover wait must be"))
            << bad;
    }
    EXPECT_THAT(
        messageOf([] { parseConfig({ "chain_root=relative" }); }), HasSubstr("must be an absolute path"));
    EXPECT_THAT(
        messageOf([] { parseConfig({ "allowed_prefixes=/a:/b/%x" }); }), HasSubstr("unknown placeholder"));
}

TEST(Config, PatternsExpandForTheUser)
{
    const UserInfo user { "alice", 1234, 100, "/home/alice" };
    EXPECT_EQ(expandUserPattern("/s/%u/%U/%%/x", user), "/s/alice/1234/%/x");
    EXPECT_EQ(expandUserPattern("%h/.baton", user), "/home/alice/.baton");
    EXPECT_THROW(expandUserPattern("/s/%", user), std::invalid_argument);
    const std::string node = "gpu07";
    EXPECT_EQ(expandUserPattern("/local/%n/%u", user, &node), "/local/gpu07/alice");
    EXPECT_THROW(expandUserPattern("/local/%n", user), std::invalid_argument);
    EXPECT_EQ(lookupUser(0).name, "root");
}

TEST(Paths, NormalizeRefusesTraversalAndRelativePaths)
{
    EXPECT_EQ(normalizeAbsolutePath("/a//b/./c/"), "/a/b/c");
    EXPECT_EQ(normalizeAbsolutePath("/"), "/");
    EXPECT_THAT(messageOf([] { normalizeAbsolutePath("/a/../etc"); }), HasSubstr("path traversal"));
    EXPECT_THAT(messageOf([] { normalizeAbsolutePath("/a/.."); }), HasSubstr("path traversal"));
    EXPECT_THAT(messageOf([] { normalizeAbsolutePath("a/b"); }), HasSubstr("not absolute"));
    EXPECT_THROW(normalizeAbsolutePath("/a\nb"), std::invalid_argument);
    EXPECT_EQ(normalizeAbsolutePath("/a/..b/c.."), "/a/..b/c..");
}

TEST(Paths, PrefixesCompareWholeComponents)
{
    EXPECT_TRUE(isWithin("/a/b", "/a/b"));
    EXPECT_TRUE(isWithin("/a/b/c", "/a/b"));
    EXPECT_FALSE(isWithin("/a/bc", "/a/b"));
    EXPECT_TRUE(isWithin("/x", "/"));
    EXPECT_EQ(findAllowedPrefix("/s/u/c", { "/s", "/s/u/", "/t" }), "/s/u");
    EXPECT_THAT(messageOf([] {
        findAllowedPrefix("/etc/x", { "/s", "/t" });
    }),
        HasSubstr("'/etc/x' is outside the allowed prefixes (/s, /t)"));
}

TEST(Paths, ChainDirIsCreatedMode0700BelowThePrefix)
{
    TempDir temp;
    const std::string prefix = temp.path() / "root";
    fs::create_directory(prefix);
    const std::string path = prefix + "/user/chain";
    ChainDir dir = openChainDir(path, prefix, ::geteuid());
    EXPECT_TRUE(dir.created);
    EXPECT_TRUE(dir.fd.valid());
    EXPECT_EQ(dir.path, path);
    EXPECT_EQ(modeOf(prefix + "/user"), 0700u);
    EXPECT_EQ(modeOf(path), 0700u);
    EXPECT_FALSE(openChainDir(path, prefix, ::geteuid()).created);
}

TEST(Paths, SymbolicLinksBelowThePrefixAreRefused)
{
    TempDir temp;
    const fs::path prefix = temp.path() / "allowed";
    const fs::path target = temp.path() / "target";
    fs::create_directories(prefix);
    fs::create_directories(target);
    fs::create_directory_symlink(target, prefix / "link");
    EXPECT_THAT(messageOf([&] { openChainDir(prefix / "link" / "sub", prefix, ::geteuid()); }),
        HasSubstr("is a symbolic link or not a directory"));
    EXPECT_THAT(messageOf([&] { openChainDir(prefix / "link", prefix, ::geteuid()); }),
        HasSubstr("is a symbolic link"));
    EXPECT_FALSE(fs::exists(target / "sub"));
    // The administrator's prefix itself may be a link.
    const fs::path linkedPrefix = temp.path() / "linked";
    fs::create_directory_symlink(prefix, linkedPrefix);
    EXPECT_NO_THROW(openChainDir(linkedPrefix / "chain", linkedPrefix, ::geteuid()));
    EXPECT_TRUE(fs::is_directory(prefix / "chain"));
    EXPECT_THAT(messageOf([&] { openChainDir("/etc/x", prefix, ::geteuid()); }), HasSubstr("outside"));
}

// A directory on the way that another user controls (made first in a world-writable prefix), or a link
// of theirs in the prefix, could redirect the job's chain directory: only root's and the job user's are
// trusted.
TEST(Paths, DirectoriesAndLinksOfAnotherUserOnTheWayAreRefused)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to give a directory to another user";
    TempDir temp;
    const fs::path scratch = temp.path() / "scratch";
    fs::create_directories(scratch / "victim");
    ASSERT_EQ(::chown((scratch / "victim").c_str(), 65534, 65534), 0);
    EXPECT_THAT(messageOf([&] { openChainDir(scratch / "victim" / "chain", scratch / "victim", 0); }),
        HasSubstr("'" + (scratch / "victim").string() + "' belongs to uid 65534, neither root nor the job user"));
    EXPECT_FALSE(fs::exists(scratch / "victim" / "chain"));
    // Its own user may use it.
    EXPECT_NO_THROW(openChainDir(scratch / "mine", scratch, 0));
    fs::create_directory_symlink(scratch / "mine", scratch / "planted");
    ASSERT_EQ(::lchown((scratch / "planted").c_str(), 65534, 65534), 0);
    EXPECT_THAT(messageOf([&] { openChainDir(scratch / "planted" / "chain", scratch / "planted", 0); }),
        HasSubstr("is a symbolic link of uid 65534"));
}

TEST(Paths, ChainDirOfAnotherUserIsRefused)
{
    TempDir temp;
    EXPECT_THAT(messageOf([&] { openChainDir(temp.path() / "c", temp.path(), ::geteuid() + 1); }),
        HasSubstr("not by the job user"));
}

TEST(Credentials, OnlyTheCallingThreadBecomesTheUser)
{
    if (::geteuid() != 0) {
        GTEST_SKIP() << "switching users needs root";
    }
    TempDir temp;
    ::chmod(temp.path().c_str(), 0755);
    const fs::path shared = temp.path() / "shared";
    const fs::path rootOnly = temp.path() / "root-only";
    fs::create_directory(shared);
    fs::create_directory(rootOnly);
    ::chmod(shared.c_str(), 01777);
    ::chmod(rootOnly.c_str(), 0700);
    // A thread that exists already (like slurmstepd's) keeps its identity.
    std::promise<void> switched;
    std::promise<uid_t> otherThreadUid;
    std::thread other([&] {
        switched.get_future().wait();
        otherThreadUid.set_value(::geteuid());
    });
    {
        ThreadCredentials asNobody(nobodyUid, nobodyGid, { nobodyGid });
        EXPECT_TRUE(asNobody.switched());
        EXPECT_EQ(::geteuid(), nobodyUid);
        switched.set_value();
        EXPECT_EQ(otherThreadUid.get_future().get(), 0u);
        other.join();
        ChainDir dir = openChainDir(shared / "nobody" / "chain", shared, nobodyUid);
        EXPECT_THAT(messageOf([&] { openChainDir(rootOnly / "chain", rootOnly, nobodyUid); }),
            HasSubstr("Permission denied"));
    }
    EXPECT_EQ(::geteuid(), 0u);
    EXPECT_EQ(::getegid(), 0u);
    EXPECT_EQ(ownerOf(shared / "nobody" / "chain"), nobodyUid);
    EXPECT_EQ(modeOf(shared / "nobody" / "chain"), 0700u);
    EXPECT_FALSE(fs::exists(rootOnly / "chain"));
}

std::string manifest(long long iteration, int version = 1)
{
    return nlohmann::json {
        { "format_version", version }, { "iteration", iteration }, { "epoch", 1 },
        { "created_unix", 1700000000.5 }, { "total_bytes", iteration * 10 },
        { "regions", nlohmann::json::array() }, { "blobs", nlohmann::json::array() }, { "sampler", nullptr },
        { "tuning", { { "interval", 7 }, { "overhead_percent", 4.5 } } },
        { "timings", { { "snapshot_seconds", 0.1 }, { "persist_seconds", 0.2 } } }
    }.dump();
}

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
    full["restart_count"] = 3;
    full["job_id"] = 4711;
    full["tuning"] = { { "interval", 7 }, { "iteration_seconds", 0.5 }, { "snapshot_seconds", "1e999" },
        { "persist_seconds", "2" }, { "overhead_percent", 4.5 }, { "stall_seconds", nullptr },
        { "command", "rm -rf /" }, { "nested", { { "interval", 1 } } } };
    const auto summary = summarizeManifest("ckpt-000000000100", full.dump());
    EXPECT_TRUE(summary.final);
    EXPECT_TRUE(summary.trainingDone);
    EXPECT_EQ(summary.restartCount, 3);
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
    EXPECT_FALSE(older.restartCount.has_value());
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
    // restart_count and job_id are forwarded too: outside 0..2^53 they are dropped.
    auto ids = nlohmann::json::parse(manifest(200));
    ids["restart_count"] = -3;
    ids["job_id"] = 18446744073709551615ull;
    const auto dropped = summarizeManifest(checkpointName(200), ids.dump());
    EXPECT_FALSE(dropped.restartCount.has_value());
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

TEST(ChainFiles, RegistryCountsEarlierJobsOnce)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const auto timeout = std::chrono::milliseconds(500);
    EXPECT_EQ(registerJob(dir.get(), "10", timeout), 0);
    EXPECT_EQ(registerJob(dir.get(), "10", timeout), 0); // another step of the same job
    EXPECT_EQ(registerJob(dir.get(), "11", timeout), 1);
    EXPECT_EQ(registerJob(dir.get(), "12", timeout), 2);
    EXPECT_EQ(registerJob(dir.get(), "11", timeout), 1);
    EXPECT_EQ(readText(temp.path() / ".baton-jobs"), "10\n11\n12\n");
    EXPECT_EQ(modeOf(temp.path() / ".baton-jobs"), 0600u);
    // A line torn by a full disk still counts, and the next entry starts on its own line.
    writeText(temp.path() / ".baton-jobs", "10\n1");
    EXPECT_EQ(registerJob(dir.get(), "13", timeout), 2);
    EXPECT_EQ(readText(temp.path() / ".baton-jobs"), "10\n1\n13\n");
}

TEST(ChainFiles, RegistryLockTimesOutInsteadOfHanging)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    registerJob(dir.get(), "1", std::chrono::milliseconds(100));
    UniqueFd holder(::open((temp.path() / ".baton-jobs").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_EQ(::flock(holder.get(), LOCK_EX), 0);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THAT(messageOf([&] { registerJob(dir.get(), "2", std::chrono::milliseconds(200)); }),
        HasSubstr("timed out"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// The registry is the job user's file, read as root's thread in slurmstepd under its lock: a huge
// (sparse) file, binary garbage or an endless line is refused at once with a message naming the bound,
// without reading it whole; the step is refused with that message instead of stalling slurmstepd.
TEST(ChainFiles, RegistryBeyondItsBoundsIsRefusedQuickly)
{
    const auto timeout = std::chrono::milliseconds(500);
    const auto refusal
        = [&](const std::function<void(const fs::path&)>& prepare, const RegistryLimits& limits) {
              TempDir temp;
              prepare(temp.path() / ".baton-jobs");
              const UniqueFd dir = openDir(temp.path());
              const auto start = std::chrono::steady_clock::now();
              const std::string message = messageOf([&] { registerJob(dir.get(), "77", timeout, limits); });
              EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500)) << message;
              return message;
          };
    // 512 MiB of holes: refused from its size, before a byte is read.
    EXPECT_THAT(refusal(
                    [](const fs::path& path) {
                        writeText(path, "1\n");
                        fs::resize_file(path, std::uintmax_t { 512 } << 20);
                    },
                    {}),
        HasSubstr("refusing '.baton-jobs': 536870912 bytes, more than the 1048576"));
    // Binary garbage.
    EXPECT_THAT(refusal(
                    [](const fs::path& path) {
                        std::string garbage = "10\n11\n";
                        for (int i = 0; i < 4096; ++i) {
                            garbage += static_cast<char>((i * 7919) & 0xff);
                        }
                        writeText(path, garbage);
                    },
                    {}),
        HasSubstr("line 3 is not a job id"));
    // One very long line of digits (not a job id either), within the byte bound.
    EXPECT_THAT(refusal([](const fs::path& path) { writeText(path, "1\n" + std::string(900000, '7')); }, {}),
        HasSubstr("line 2 is not a job id (900000 bytes)"));
    // Too many lines, with the bounds lowered so that the test stays small.
    RegistryLimits fewLines;
    fewLines.maxLines = 100;
    EXPECT_THAT(refusal(
                    [](const fs::path& path) {
                        std::string ids;
                        for (int i = 0; i < 200; ++i) {
                            ids += std::to_string(1000 + i) + "\n";
                        }
                        writeText(path, ids);
                    },
                    fewLines),
        HasSubstr("more than 100 lines"));
    // Empty lines are skipped and a registry within the bounds counts as before.
    TempDir temp;
    writeText(temp.path() / ".baton-jobs", "10\n\n11\n10\n");
    const UniqueFd dir = openDir(temp.path());
    EXPECT_EQ(registerJob(dir.get(), "12", timeout), 2);
    EXPECT_EQ(registerJob(dir.get(), "11", timeout), 1);
    EXPECT_EQ(readText(temp.path() / ".baton-jobs"), "10\n\n11\n10\n12\n");
    // The byte bound is the limits' (the read stops one byte past it if the file grows meanwhile).
    RegistryLimits small;
    small.maxBytes = 8;
    writeText(temp.path() / ".baton-jobs", "100\n200\n300\n");
    EXPECT_THAT(
        messageOf([&] { registerJob(dir.get(), "12", timeout, small); }), HasSubstr("more than the 8"));
}

TEST(ChainFiles, SpoolAppendsWholeLinesAndRefusesLinks)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const auto timeout = std::chrono::milliseconds(500);
    appendToSpool(dir.get(), "{\"a\":1}", timeout);
    appendToSpool(dir.get(), "{\"b\":2}", timeout);
    const fs::path spool = temp.path() / ".baton-spool" / "events.jsonl";
    EXPECT_EQ(readText(spool), "{\"a\":1}\n{\"b\":2}\n");
    EXPECT_EQ(modeOf(temp.path() / ".baton-spool"), 0700u);
    EXPECT_EQ(modeOf(spool), 0600u);
    writeText(spool, "{\"torn\":");
    appendToSpool(dir.get(), "{\"c\":3}", timeout);
    EXPECT_EQ(readText(spool), "{\"torn\":\n{\"c\":3}\n");

    TempDir other;
    const fs::path victim = temp.path() / "victim";
    writeText(victim, "keep");
    fs::create_directory(other.path() / ".baton-spool");
    fs::create_symlink(victim, other.path() / ".baton-spool" / "events.jsonl");
    EXPECT_THROW(appendToSpool(openDir(other.path()).get(), "x", timeout), std::runtime_error);
    EXPECT_EQ(readText(victim), "keep");
}

StepEvent sampleEvent()
{
    StepEvent event;
    event.kind = "task_exit";
    event.jobId = 42;
    event.requeueCount = 1;
    event.step = "batch";
    event.chain = "c";
    event.chainDir = "/s/c";
    event.node = "n1";
    event.restartCount = 3;
    event.deadlineUnix = 1700003600;
    event.task = 0;
    event.waitStatus = 7 << 8; // exited with 7
    event.checkpoint = summarizeManifest("ckpt-000000000200", manifest(200));
    event.timeUnix = 1700000001;
    return event;
}

TEST(Event, CarriesTheDocumentedFields)
{
    StepEvent event = sampleEvent();
    const auto json = eventJson(event);
    EXPECT_EQ(json["version"], 2);
    // One task_exit per step and node: the task is in the body, not in the key.
    EXPECT_EQ(json["idempotency_key"], "42.1.n1.batch.task_exit");
    EXPECT_EQ(json["task"], 0);
    EXPECT_FALSE(json.contains("tasks_exited"));
    event.tasksExited = 4;
    EXPECT_EQ(eventJson(event)["tasks_exited"], 4);
    EXPECT_EQ(json["job_id"], 42);
    EXPECT_EQ(json["requeue_count"], 1);
    EXPECT_EQ(json["chain"], "c");
    EXPECT_EQ(json["step"], "batch");
    EXPECT_EQ(json["node"], "n1");
    EXPECT_EQ(json["exit_status"], 7);
    EXPECT_TRUE(json["signal"].is_null());
    EXPECT_EQ(json["restart_count"], 3);
    EXPECT_EQ(json["deadline_unix"], 1700003600);
    EXPECT_EQ(json["checkpoint"]["iteration"], 200);
    EXPECT_EQ(json["checkpoint"]["total_bytes"], 2000);
    EXPECT_EQ(json["checkpoint"]["final"], false);
    EXPECT_EQ(json["checkpoint"]["training_done"], false);
    EXPECT_TRUE(json["checkpoint"]["restart_count"].is_null());
    EXPECT_TRUE(json["checkpoint"]["job_id"].is_null());
    EXPECT_EQ(json["checkpoint"]["world_size"], 1);
    EXPECT_TRUE(json["checkpoint"]["region_layouts"].is_null());
    EXPECT_TRUE(json["tasks"].is_null());
    event.tasks = 8;
    EXPECT_EQ(eventJson(event)["tasks"], 8);
    EXPECT_EQ(json["tuning"]["overhead_percent"], 4.5);

    event.waitStatus = SIGKILL; // killed
    event.checkpoint.reset();
    const auto killed = eventJson(event);
    EXPECT_TRUE(killed["exit_status"].is_null());
    EXPECT_EQ(killed["signal"], SIGKILL);
    EXPECT_TRUE(killed["checkpoint"].is_null());
    EXPECT_TRUE(killed["tuning"].is_null());
}

TEST(Event, KeyDiffersByRequeueAndNode)
{
    StepEvent event = sampleEvent();
    const std::string key = eventJson(event)["idempotency_key"];
    event.timeUnix += 10; // a resent report of the same step and node: the same key
    EXPECT_EQ(eventJson(event)["idempotency_key"], key);
    StepEvent requeued = sampleEvent();
    requeued.requeueCount = 2;
    StepEvent elsewhere = sampleEvent();
    elsewhere.node = "n2";
    StepEvent start = sampleEvent();
    start.kind = "step_start";
    start.task.reset();
    const std::set<std::string> keys { key, eventJson(requeued)["idempotency_key"],
        eventJson(elsewhere)["idempotency_key"], eventJson(start)["idempotency_key"] };
    EXPECT_EQ(keys.size(), 4u);
    EXPECT_EQ(eventJson(start)["idempotency_key"], "42.1.n1.batch.step_start");
}

TEST(Event, ForwardsOnlyKnownNumericTuning)
{
    StepEvent event = sampleEvent();
    event.checkpoint->final = true;
    event.checkpoint->trainingDone = true;
    event.checkpoint->restartCount = 2;
    event.checkpoint->jobId = 41;
    event.checkpoint->tuning = { { "interval", 9 }, { "stall_seconds", INFINITY }, { "note", "x" },
        { "snapshot_seconds", { { "deep", 1 } } } };
    const auto json = eventJson(event);
    EXPECT_EQ(json["tuning"], (nlohmann::json { { "interval", 9 } }));
    EXPECT_EQ(json["checkpoint"]["final"], true);
    EXPECT_EQ(json["checkpoint"]["training_done"], true);
    EXPECT_EQ(json["checkpoint"]["restart_count"], 2);
    EXPECT_EQ(json["checkpoint"]["job_id"], 41);
}

TEST(HttpUrl, ParsesHostsPortsAndPaths)
{
    const auto plain = parseHttpUrl("http://head");
    EXPECT_EQ(plain.host, "head");
    EXPECT_EQ(plain.port, "80");
    EXPECT_EQ(plain.basePath, "");
    const auto full = parseHttpUrl("http://10.0.0.1:8760/baton/");
    EXPECT_EQ(full.host, "10.0.0.1");
    EXPECT_EQ(full.port, "8760");
    EXPECT_EQ(full.basePath, "/baton");
    const auto v6 = parseHttpUrl("http://[::1]:99");
    EXPECT_EQ(v6.host, "::1");
    EXPECT_EQ(v6.port, "99");
    for (const char* bad : { "https://h", "http://", "http://h:", "http://h:0", "http://h:70000",
             "http://h:x", "http://[::1", "http://u@h" }) {
        EXPECT_THROW(parseHttpUrl(bad), std::invalid_argument) << bad;
    }
}

// A real HTTP server on a free loopback port, recording what it receives.
// batond's event endpoint below a base path.
class EventServer : public baton::test::HttpSink {
public:
    explicit EventServer(int status = 204)
        : HttpSink("/base", "/v1/events", status)
    { }
};

TEST(HttpClient, PostsToARealServer)
{
    EventServer server;
    const auto result
        = postJson(parseHttpUrl(server.url()), "/v1/events", "{\"x\":1}", std::chrono::seconds(5));
    EXPECT_TRUE(result.ok) << result.error;
    EXPECT_EQ(result.status, 204);
    EXPECT_EQ(server.bodies(), std::vector<std::string> { "{\"x\":1}" });
}

TEST(HttpClient, ErrorStatusIsAFailure)
{
    EventServer server(500);
    const auto result = postJson(parseHttpUrl(server.url()), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_FALSE(result.ok);
    EXPECT_EQ(result.status, 500);
    EXPECT_THAT(result.error, HasSubstr("500"));
}

// A listening socket that never accepts: connect succeeds, no answer ever comes.
class SilentListener {
public:
    SilentListener()
        : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0))
    {
        sockaddr_in address {};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof address;
        EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&address), length), 0);
        EXPECT_EQ(::listen(fd_.get(), 4), 0);
        EXPECT_EQ(::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
        port_ = ntohs(address.sin_port);
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    void close() { fd_.reset(); }

private:
    UniqueFd fd_;
    int port_ = 0;
};

TEST(HttpClient, SilentServerTimesOut)
{
    SilentListener listener;
    const auto start = std::chrono::steady_clock::now();
    const auto result
        = postJson(parseHttpUrl(listener.url()), "/v1/events", "{}", std::chrono::milliseconds(300));
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_FALSE(result.ok);
    EXPECT_THAT(result.error, HasSubstr("timed out"));
    EXPECT_GE(elapsed, std::chrono::milliseconds(250));
    EXPECT_LT(elapsed, std::chrono::seconds(2));
}

TEST(HttpClient, ClosedPortFailsFast)
{
    SilentListener listener;
    const std::string url = listener.url();
    listener.close();
    const auto result = postJson(parseHttpUrl(url), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_FALSE(result.ok);
    EXPECT_THAT(result.error, HasSubstr("connect"));
}

// In a forked child with private mount and network namespaces: /etc/resolv.conf names a UDP socket
// on 127.0.0.1:53 that never answers, and postJson must give up on the name at its deadline.
// Returns 0 when it did, 77 when this machine does not allow the namespaces, else a failure code.
int postThroughSilentNameServer(const fs::path& resolvConf)
{
    if (::unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) {
        // Not root: a user namespace maps this user to root inside.
        const std::string uid = std::to_string(::getuid()), gid = std::to_string(::getgid());
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0) {
            std::perror("unshare");
            return 77;
        }
        writeText("/proc/self/setgroups", "deny");
        writeText("/proc/self/uid_map", "0 " + uid + " 1");
        writeText("/proc/self/gid_map", "0 " + gid + " 1");
    }
    // The file system type is ignored for these two; "none" rather than NULL keeps valgrind quiet.
    if (::mount("none", "/", "none", MS_REC | MS_PRIVATE, nullptr) != 0
        || ::mount(resolvConf.c_str(), "/etc/resolv.conf", "none", MS_BIND, nullptr) != 0) {
        std::perror("mount");
        return 77;
    }
    // Loopback up, and an address that is not loopback, so that AI_ADDRCONFIG still asks for IPv4.
    const UniqueFd control(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq lo {};
    std::strcpy(lo.ifr_name, "lo");
    lo.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    ifreq alias {};
    std::strcpy(alias.ifr_name, "lo:1");
    auto* address = reinterpret_cast<sockaddr_in*>(&alias.ifr_addr);
    address->sin_family = AF_INET;
    address->sin_addr.s_addr = htonl(0xC0000201); // 192.0.2.1, a documentation address
    if (::ioctl(control.get(), SIOCSIFFLAGS, &lo) != 0 || ::ioctl(control.get(), SIOCSIFADDR, &alias) != 0) {
        std::perror("ioctl");
        return 77;
    }
    const UniqueFd nameServer(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in dns {};
    dns.sin_family = AF_INET;
    dns.sin_port = htons(53);
    dns.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(nameServer.get(), reinterpret_cast<sockaddr*>(&dns), sizeof dns) != 0) {
        std::perror("bind 127.0.0.1:53");
        return 77;
    }

    const auto start = std::chrono::steady_clock::now();
    const auto result = postJson(parseHttpUrl("http://batond.baton-test.example:8760"), "/v1/events", "{}",
        std::chrono::milliseconds(300));
    const auto elapsed = std::chrono::steady_clock::now() - start;
    char query[512];
    const bool asked = ::recv(nameServer.get(), query, sizeof query, MSG_DONTWAIT) > 0;
    if (result.ok || result.error.find("timed out") == std::string::npos) {
        std::fprintf(stderr, "expected a resolution time-out, got: %s\n", result.error.c_str());
        return 1;
    }
    if (elapsed > std::chrono::seconds(2)) {
        std::fprintf(stderr, "gave up only after %lld ms\n",
            static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()));
        return 2;
    }
    if (!asked) {
        std::fprintf(stderr, "the silent name server was never asked\n");
        return 3;
    }
    return 0;
}

TEST(HttpClient, SilentNameServerTimesOut)
{
    TempDir temp;
    writeText(temp.path() / "resolv.conf", "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::_Exit(postThroughSilentNameServer(temp.path() / "resolv.conf"));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        GTEST_SKIP() << "this machine allows no private mount and network namespaces";
    }
    EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

TEST(HttpClient, NamesAndAddressesResolve)
{
    EventServer server;
    std::string url = server.url();
    url.replace(url.find("127.0.0.1"), 9, "localhost");
    const auto byName = postJson(parseHttpUrl(url), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_TRUE(byName.ok) << byName.error;
    const auto unknown = postJson(
        parseHttpUrl("http://no-such-host.invalid:8760"), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_FALSE(unknown.ok);
    EXPECT_THAT(unknown.error, HasSubstr("cannot resolve 'no-such-host.invalid'"));
}

std::size_t jsonLinesIn(const fs::path& path)
{
    std::istringstream lines(readText(path));
    std::size_t count = 0;
    for (std::string line; std::getline(lines, line);) {
        count += nlohmann::json::accept(line) ? 1 : 0;
    }
    return count;
}

bool mungeAnswers()
{
    try {
        baton::munge::decode(baton::munge::encode("probe"));
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

TEST(Delivery, PostsWhenBatondAnswersAndSpoolsWhenNot)
{
    if (!mungeAnswers()) {
        GTEST_SKIP() << "munged is not running";
    }
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const nlohmann::json event
        = { { "version", 2 }, { "kind", "step_start" }, { "idempotency_key", "1.0.n.0.step_start" } };
    const auto timeout = std::chrono::seconds(5);
    auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
    {
        EventServer server;
        const auto url = parseHttpUrl(server.url());
        const SignedEvent signedEvent = signEvent(event, url, deadline());
        EXPECT_EQ(signedEvent.signError, "");
        const auto posted = deliverEvent(signedEvent, url, dir.get(), timeout, timeout);
        EXPECT_EQ(posted.how, Delivery::Posted) << posted.postError;
        const auto received = server.received();
        ASSERT_EQ(received.size(), 1u);
        EXPECT_EQ(nlohmann::json::parse(received[0].body), event);
        EXPECT_EQ(received[0].target, "/base/v1/events");
        // The header is a credential of this process (root in slurmstepd) bound to this very request.
        const std::string scheme(baton::munge::authorizationScheme);
        ASSERT_EQ(received[0].authorization.rfind(scheme, 0), 0u) << received[0].authorization;
        const auto identity = baton::munge::decode(received[0].authorization.substr(scheme.size()));
        EXPECT_EQ(identity.uid, ::getuid());
        EXPECT_EQ(identity.gid, ::getgid());
        if (::getuid() == 0) {
            EXPECT_EQ(identity.uid, 0u);
        }
        EXPECT_EQ(
            identity.payload, baton::munge::requestPayload("POST", "/base/v1/events", received[0].body));
    }
    EXPECT_FALSE(fs::exists(temp.path() / ".baton-spool"));
    SilentListener absent;
    const std::string url = absent.url();
    absent.close();
    const auto spooled = deliverEvent(signEvent(event, parseHttpUrl(url), deadline()), parseHttpUrl(url),
        dir.get(), std::chrono::seconds(1), std::chrono::seconds(1));
    EXPECT_EQ(spooled.how, Delivery::Spooled);
    EXPECT_THAT(spooled.postError, HasSubstr("connect"));
    const auto noUrl = deliverEvent(signEvent(event, std::nullopt, deadline()), std::nullopt, dir.get(),
        std::chrono::seconds(1), timeout);
    EXPECT_EQ(noUrl.how, Delivery::Spooled);
    // The spool stays plain JSON lines: no credential is stored.
    EXPECT_EQ(
        readText(temp.path() / ".baton-spool" / "events.jsonl"), event.dump() + "\n" + event.dump() + "\n");
}

// Every slurmstepd callback that reports signs as root: user_init runs with the job user's effective
// ids and saved uid 0 (as after slurmstepd's seteuid), the task callbacks and exit as root. A thread
// that cannot become root signs nothing (batond would refuse the user's credential) and the event is
// spooled.
TEST(Delivery, EventsAreSignedAsRootInEveryCallbackContext)
{
    if (::geteuid() != 0) {
        GTEST_SKIP() << "switching users needs root";
    }
    if (!mungeAnswers()) {
        GTEST_SKIP() << "munged is not running";
    }
    const auto url = parseHttpUrl("http://127.0.0.1:1/base");
    const nlohmann::json event = { { "version", 2 }, { "kind", "step_start" } };
    const auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
    const auto signerOf = [&](const SignedEvent& signedEvent) {
        const std::string scheme(baton::munge::authorizationScheme);
        EXPECT_EQ(signedEvent.signError, "");
        EXPECT_EQ(signedEvent.authorization.rfind(scheme, 0), 0u) << signedEvent.authorization;
        const auto identity = baton::munge::decode(signedEvent.authorization.substr(scheme.size()));
        EXPECT_EQ(
            identity.payload, baton::munge::requestPayload("POST", "/base/v1/events", signedEvent.body));
        return identity.uid;
    };
    // task_exit and exit: slurmstepd is root.
    EXPECT_EQ(signerOf(signEventAsRoot(event, url, deadline())), 0u);
    // user_init: the job user's effective ids on this thread, saved uid 0.
    {
        ThreadCredentials asNobody(nobodyUid, nobodyGid, { nobodyGid });
        ASSERT_EQ(::geteuid(), nobodyUid);
        EXPECT_EQ(signerOf(signEvent(event, url, deadline())), nobodyUid) << "what the old report signed";
        EXPECT_EQ(signerOf(signEventAsRoot(event, url, deadline())), 0u);
        // Back to the job user's ids afterwards, for the spool.
        EXPECT_EQ(::geteuid(), nobodyUid);
        EXPECT_EQ(::getegid(), nobodyGid);
        EXPECT_EQ(::getgroups(0, nullptr), 1);
    }
    EXPECT_EQ(::geteuid(), 0u);
    // A thread that dropped root for good cannot sign as root: nothing is signed.
    std::thread([&] {
        ASSERT_EQ(::syscall(SYS_setresuid, nobodyUid, nobodyUid, nobodyUid), 0);
        const SignedEvent refused = signEventAsRoot(event, url, deadline());
        EXPECT_EQ(refused.authorization, "");
        EXPECT_THAT(refused.signError, HasSubstr("not signed as root"));
        EXPECT_EQ(refused.body, event.dump());
    }).join();
    EXPECT_EQ(::geteuid(), 0u);
}

// The circuit breaker of one slurmstepd: once batond did not answer, the next reports spool at once
// instead of each waiting for the whole timeout, until the breaker's time is up; an HTTP answer (even
// an error status) closes it again.
TEST(Delivery, BreakerSpoolsAtOnceAfterBatondWasUnreachable)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    SignedEvent event;
    event.body = "{\"kind\":\"task_exit\"}";
    event.authorization = "MUNGE x";
    // A silent batond is given 500 ms; a server that answers gets time even under valgrind.
    const auto timeout = std::chrono::milliseconds(500);
    const auto answerTimeout = std::chrono::seconds(10);
    DeliveryBreaker breaker(std::chrono::milliseconds(2000));
    SilentListener silent;
    const auto url = parseHttpUrl(silent.url());
    const auto timed = [&](const std::optional<HttpUrl>& to, std::chrono::milliseconds postTimeout) {
        const auto start = std::chrono::steady_clock::now();
        const auto result = deliverEvent(event, to, dir.get(), postTimeout, answerTimeout, &breaker);
        return std::pair(result, std::chrono::steady_clock::now() - start);
    };
    const auto [first, firstTook] = timed(url, timeout);
    EXPECT_EQ(first.how, Delivery::Spooled);
    EXPECT_THAT(first.postError, HasSubstr("timed out"));
    EXPECT_GE(firstTook, timeout);
    for (int i = 0; i < 5; ++i) {
        const auto [later, laterTook] = timed(url, timeout);
        EXPECT_EQ(later.how, Delivery::Spooled);
        EXPECT_THAT(later.postError, HasSubstr("not tried"));
        EXPECT_LT(laterTook, timeout / 2);
    }
    // After the breaker's time, batond is tried again; it answers now.
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    {
        EventServer server(500);
        const auto [answered, took] = timed(parseHttpUrl(server.url()), answerTimeout);
        EXPECT_EQ(answered.how, Delivery::Spooled);
        EXPECT_THAT(answered.postError, HasSubstr("HTTP status 500"));
        EXPECT_FALSE(breaker.open(std::chrono::steady_clock::now()));
    }
    {
        EventServer server;
        EXPECT_EQ(timed(parseHttpUrl(server.url()), answerTimeout).first.how, Delivery::Posted);
        EXPECT_EQ(server.received().size(), 1u);
    }
    EXPECT_EQ(jsonLinesIn(temp.path() / ".baton-spool" / "events.jsonl"), 7u);
}

TEST(Delivery, UnsignedEventsAreSpooledNotPosted)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const nlohmann::json event = { { "version", 2 }, { "kind", "step_start" } };
    EventServer server;
    const auto url = parseHttpUrl(server.url());
    const SignedEvent unsigned_ = signEvent(event, url,
        std::chrono::steady_clock::now() + std::chrono::seconds(5), (temp.path() / "no-munged").string());
    EXPECT_EQ(unsigned_.authorization, "");
    EXPECT_THAT(unsigned_.signError, HasSubstr("munge"));
    const auto result
        = deliverEvent(unsigned_, url, dir.get(), std::chrono::seconds(5), std::chrono::seconds(5));
    EXPECT_EQ(result.how, Delivery::Spooled);
    EXPECT_THAT(result.postError, HasSubstr("not signed"));
    EXPECT_TRUE(server.received().empty());
    EXPECT_EQ(readText(temp.path() / ".baton-spool" / "events.jsonl"), event.dump() + "\n");
}

TEST(Delivery, SigningWaitsForMungedOnlyUntilTheDeadline)
{
    // A socket that accepts connections and never answers: libmunge would wait about 10 s.
    TempDir temp;
    const fs::path socketPath = temp.path() / "silent.socket";
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address {};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socketPath.c_str(), sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listener.get(), 16), 0);
    const auto url = parseHttpUrl("http://127.0.0.1:1");
    const auto start = std::chrono::steady_clock::now();
    const auto first
        = signEvent({ { "n", 1 } }, url, start + std::chrono::milliseconds(300), socketPath.string());
    EXPECT_THAT(first.signError, HasSubstr("did not answer in time"));
    // While that request is still pending, the next report does not start another one.
    const auto second = signEvent({ { "n", 2 } }, url, start + std::chrono::seconds(5), socketPath.string());
    EXPECT_THAT(second.signError, HasSubstr("earlier request"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    EXPECT_EQ(second.body, "{\"n\":2}");
}

} // namespace
