// Proves that the pg suite talks to a real PostgreSQL server.
#include "tests/support/services.hpp"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <memory>

namespace {

using Connection = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

TEST(PostgresSmoke, SelectVersionThroughLibpq)
{
    baton::test::PostgresServer server;
    Connection conn(PQconnectdb((server.conninfo() + " connect_timeout=10").c_str()), &PQfinish);
    ASSERT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());

    Result result(PQexec(conn.get(), "SELECT version()"), &PQclear);
    ASSERT_EQ(PQresultStatus(result.get()), PGRES_TUPLES_OK) << PQerrorMessage(conn.get());
    ASSERT_EQ(PQntuples(result.get()), 1);
    EXPECT_EQ(std::string(PQgetvalue(result.get(), 0, 0)).rfind("PostgreSQL ", 0), 0u);
    EXPECT_GE(PQserverVersion(conn.get()), 150000);
}

TEST(PostgresSmoke, TwoServersRunSideBySide)
{
    baton::test::PostgresServer first;
    baton::test::PostgresServer second;
    EXPECT_NE(first.conninfo(), second.conninfo());
    for (const auto* server : {&first, &second}) {
        Connection conn(PQconnectdb((server->conninfo() + " connect_timeout=10").c_str()), &PQfinish);
        EXPECT_EQ(PQstatus(conn.get()), CONNECTION_OK) << PQerrorMessage(conn.get());
    }
}

}  // namespace
