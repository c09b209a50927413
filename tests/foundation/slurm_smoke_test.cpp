// Proves that the slurm suite runs jobs on a real slurmctld + slurmd.
#include "tests/support/services.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace {

using baton::test::run;

std::string readFile(const std::filesystem::path& path)
{
    std::ifstream in(path);
    std::stringstream content;
    content << in.rdbuf();
    return content.str();
}

TEST(SlurmSmoke, OneLineJobRunsThroughSbatchWait)
{
    baton::test::SlurmCluster cluster;
    const auto out = cluster.dir() / "job.out";
    auto submitted = run({"sbatch", "--wait", "--parsable", "--time=1", "--output=" + out.string(),
                          "--wrap=echo hello from $SLURM_JOB_ID"});
    ASSERT_EQ(submitted.exitCode, 0) << submitted.output;
    const std::string jobId = submitted.output.substr(0, submitted.output.find_first_of(";\n"));
    EXPECT_EQ(readFile(out), "hello from " + jobId + "\n");

    auto state = run({"scontrol", "show", "job", jobId});
    ASSERT_EQ(state.exitCode, 0) << state.output;
    EXPECT_NE(state.output.find("JobState=COMPLETED"), std::string::npos) << state.output;
}

TEST(SlurmSmoke, FailingJobReportsItsExitCode)
{
    baton::test::SlurmCluster cluster;
    auto submitted = run({"sbatch", "--wait", "--time=1", "--output=/dev/null", "--wrap=exit 7"});
    EXPECT_NE(submitted.exitCode, 0) << submitted.output;
}

}  // namespace
