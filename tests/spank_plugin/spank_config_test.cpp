// The plugin's option values, plugstack configuration, chain directory paths and credential switch.
#include "spank_core_support.hpp"

#include "spank_plugin/config.hpp"
#include "spank_plugin/credentials.hpp"
#include "spank_plugin/paths.hpp"
#include "spank_plugin/values.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <future>
#include <sys/stat.h>
#include <thread>

namespace {

using namespace baton::spank;
using namespace baton::spank::test;

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
    EXPECT_EQ(parseChainSeq("0"), 0);
    EXPECT_EQ(parseChainSeq("2147483647"), 2147483647);
    for (const char* bad : { "", "-1", "1.5", "2147483648", "x" }) {
        EXPECT_THAT(messageOf([&] { parseChainSeq(bad); }), HasSubstr("seq must be a whole number")) << bad;
    }
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
        HasSubstr("is a symbolic link below the administrator's"));
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

// Where others may write, they may rename: a directory on the way writable by its group or everyone is
// refused unless it is sticky, as /tmp and a scratch disk's root are.
TEST(Paths, DirectoriesWritableByOthersOnTheWayAreRefusedUnlessSticky)
{
    TempDir temp;
    const fs::path open = temp.path() / "open";
    fs::create_directory(open);
    ::chmod(open.c_str(), 0775);
    EXPECT_THAT(messageOf([&] { openChainDir(open / "chain", temp.path(), ::geteuid()); }),
        HasSubstr("'" + open.string() + "' is writable by other users and not sticky"));
    EXPECT_FALSE(fs::exists(open / "chain"));
    ::chmod(open.c_str(), 01777);
    EXPECT_NO_THROW(openChainDir(open / "chain", temp.path(), ::geteuid()));
}

// A link of the administrator's is walked by the same rule as the path it stands in: its target may not
// lead through another user's directory.
TEST(Paths, TheTargetOfALinkInThePrefixIsWalkedByTheSameRule)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to give a directory to another user";
    TempDir temp;
    const fs::path theirs = temp.path() / "theirs";
    fs::create_directories(theirs / "disk");
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    fs::create_directory_symlink(theirs / "disk", temp.path() / "local");
    EXPECT_THAT(messageOf([&] { openChainDir(temp.path() / "local" / "chain", temp.path() / "local", 0); }),
        HasSubstr("'" + theirs.string() + "' belongs to uid 65534"));
    EXPECT_FALSE(fs::exists(theirs / "disk" / "chain"));
}

TEST(Config, TheAdministratorsPartOfAPatternEndsBeforeItsFirstSubstitution)
{
    EXPECT_EQ(administratorPart("/local/%u/baton"), "/local");
    EXPECT_EQ(administratorPart("/local/nvme/baton-%u/"), "/local/nvme");
    EXPECT_EQ(administratorPart("/scratch/baton/"), "/scratch/baton");
    EXPECT_EQ(administratorPart("/%n/%u"), "/");
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

} // namespace
