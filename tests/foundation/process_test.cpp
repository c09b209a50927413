#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <fstream>

using namespace baton::test;
using namespace std::chrono_literals;

TEST(Process, CapturesOutputAndExitCode)
{
    auto result = run({"sh", "-c", "echo out; echo err >&2; exit 3"});
    EXPECT_EQ(result.exitCode, 3);
    EXPECT_FALSE(result.timedOut);
    EXPECT_NE(result.output.find("out\n"), std::string::npos);
    EXPECT_NE(result.output.find("err\n"), std::string::npos);
}

TEST(Process, ArgumentsAreNotInterpretedByAShell)
{
    auto result = run({"echo", "$HOME; rm -rf /nonexistent", "`id`"});
    EXPECT_EQ(result.exitCode, 0);
    EXPECT_EQ(result.output, "$HOME; rm -rf /nonexistent `id`\n");
}

TEST(Process, KillsAProgramThatOverrunsItsTimeout)
{
    const auto start = std::chrono::steady_clock::now();
    auto result = run({"sleep", "30"}, 200ms);
    EXPECT_TRUE(result.timedOut);
    EXPECT_EQ(result.exitCode, 128 + 9);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(Process, MissingProgramThrows)
{
    EXPECT_THROW(run({"baton-no-such-program"}), std::system_error);
}

TEST(TempDir, IsRemovedWithItsContents)
{
    std::filesystem::path kept;
    {
        TempDir dir("baton-unit");
        kept = dir.path();
        ASSERT_TRUE(std::filesystem::is_directory(kept));
        std::filesystem::create_directories(kept / "a" / "b");
        std::ofstream(kept / "a" / "b" / "file") << "x";
    }
    EXPECT_FALSE(std::filesystem::exists(kept));
}
