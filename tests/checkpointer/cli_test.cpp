// The baton-ckpt command line: ls, verify, inspect, prune, --version and bad usage.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/checkpointer.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::run;

namespace {

std::string cli()
{
    const char* path = std::getenv("BATON_CKPT_CLI");
    return path != nullptr ? path : "baton-ckpt";
}

class Cli : public ::testing::Test {
protected:
    void SetUp() override
    {
        Options options;
        options.chainDir = dir_.path();
        options.keep = 5;
        options.log = [](std::string_view) {};
        options.jobId = 123;
        options.chainSeq = 2;
        Checkpointer ckpt(options);
        state_.assign(100000, std::byte { 7 });
        ckpt.registerRegion("weights", state_.data(), state_.size());
        for (std::uint64_t it : { 10, 20, 30 })
            ASSERT_TRUE(ckpt.checkpointNow(it));
        ASSERT_TRUE(ckpt.checkpointNow(40, { true, true }));
        std::filesystem::create_directory(dir_.path() / checkpointDirName(50)); // interrupted, no manifest
    }

    std::string chain() const { return dir_.path().string(); }
    std::string ckpt(std::uint64_t it) const { return (dir_.path() / checkpointDirName(it)).string(); }

    baton::test::TempDir dir_ { "ckpt-cli" };
    std::vector<std::byte> state_;
};

TEST_F(Cli, Version)
{
    auto r = run({ cli(), "--version" });
    EXPECT_EQ(r.exitCode, 0);
    EXPECT_NE(r.output.find("baton-ckpt "), std::string::npos);
}

TEST_F(Cli, ListShowsIterationsSizesAndStatus)
{
    auto r = run({ cli(), "ls", chain() });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("ITERATION"), std::string::npos);
    for (const char* it : { "\n10 ", "\n20 ", "\n30 ", "\n40 " })
        EXPECT_NE(r.output.find(it), std::string::npos) << it << r.output;
    EXPECT_NE(r.output.find("97.7 KiB"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("committed"), std::string::npos);
    EXPECT_NE(r.output.find("committed, final, training done (job 123, seq 2)"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("incomplete"), std::string::npos);
}

TEST_F(Cli, VerifyFindsCorruption)
{
    auto r = run({ cli(), "verify", chain() });
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find(ckpt(40) + ": ok"), std::string::npos) << r.output;

    auto data = std::filesystem::path(ckpt(30)) / kDataFileName;
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('\x42');
    f.close();
    r = run({ cli(), "verify", chain() });
    EXPECT_EQ(r.exitCode, 1);
    EXPECT_NE(r.output.find(ckpt(30) + ": FAILED: checksum mismatch in 'weights'"), std::string::npos)
        << r.output;
    r = run({ cli(), "verify", ckpt(40) });
    EXPECT_EQ(r.exitCode, 0) << r.output;
}

TEST_F(Cli, InspectPrintsTheManifest)
{
    auto r = run({ cli(), "inspect", chain() });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    auto json = nlohmann::json::parse(r.output);
    EXPECT_EQ(json["iteration"], 40);
    EXPECT_EQ(json["regions"][0]["name"], "weights");
    EXPECT_EQ(json["final"], true);
    EXPECT_EQ(json["training_done"], true);
    EXPECT_EQ(json["job_id"], 123);
    EXPECT_EQ(json["seq"], 2);
    r = run({ cli(), "inspect", ckpt(20) });
    EXPECT_EQ(nlohmann::json::parse(r.output)["iteration"], 20);
    EXPECT_EQ(nlohmann::json::parse(r.output)["final"], false);

    // An older manifest without the fields shows them as a reader takes them.
    const auto path = std::filesystem::path(ckpt(30)) / kManifestName;
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto old = parseManifest(text).document;
    for (const char* key : { "job_id", "seq", "final", "training_done" })
        old.erase(key);
    std::ofstream(path, std::ios::trunc) << renderManifest(old);
    r = run({ cli(), "inspect", ckpt(30) });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    json = nlohmann::json::parse(r.output);
    EXPECT_TRUE(json["job_id"].is_null());
    EXPECT_EQ(json["final"], false);
    EXPECT_EQ(json["training_done"], false);
}

TEST_F(Cli, PruneKeepsTheNewest)
{
    auto r = run({ cli(), "prune", chain(), "--keep", "2" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    auto list = listCheckpoints(dir_.path());
    std::vector<std::uint64_t> left;
    for (const auto& i : list)
        left.push_back(i.iteration);
    // The interrupted ckpt-50 is newer than every committed one: it stays (it may still be in progress).
    EXPECT_EQ(left, (std::vector<std::uint64_t> { 30, 40, 50 }));
}

TEST_F(Cli, BadUsageExitsWithTwo)
{
    EXPECT_EQ(run({ cli() }).exitCode, 2);
    EXPECT_EQ(run({ cli(), "frobnicate", chain() }).exitCode, 2);
    EXPECT_EQ(run({ cli(), "ls" }).exitCode, 2);
    EXPECT_EQ(run({ cli(), "ls", chain() + "/absent" }).exitCode, 2);
    auto r = run({ cli(), "prune", chain(), "--keep", "zero" });
    EXPECT_EQ(r.exitCode, 2);
    EXPECT_NE(r.output.find("--keep 'zero'"), std::string::npos) << r.output;
    EXPECT_EQ(listCheckpoints(dir_.path()).size(), 5u);
}

} // namespace
