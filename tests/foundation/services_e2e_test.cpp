// Both services at once: a Slurm job talks to the private PostgreSQL server, as batond's jobs will.
#include "tests/support/services.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace {

TEST(ServicesEndToEnd, SlurmJobQueriesPostgres)
{
    baton::test::PostgresServer postgres;
    baton::test::SlurmCluster slurm;
    const auto out = slurm.dir() / "job.out";
    auto submitted = baton::test::run(
        {"sbatch", "--wait", "--time=1", "--output=" + out.string(),
         "--wrap=psql -X -At -c 'SELECT 6 * 7' '" + postgres.conninfo() + "'"});
    ASSERT_EQ(submitted.exitCode, 0) << submitted.output;
    std::ifstream in(out);
    std::stringstream content;
    content << in.rdbuf();
    EXPECT_EQ(content.str(), "42\n");
}

}  // namespace
