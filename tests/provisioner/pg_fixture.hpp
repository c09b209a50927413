// One private PostgreSQL server per test program, and a fresh database per test.
#pragma once

#include "db/connection.hpp"
#include "tests/support/services.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace baton::test {

inline PostgresServer& sharedServer()
{
    static PostgresServer server;
    return server;
}

// A new, empty database named after the running test.
inline std::string freshDatabase()
{
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "t" + std::to_string(++counter) + "_" + info->name();
    for (auto& c : name)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return sharedServer().createDatabase(name.substr(0, 60));
}

} // namespace baton::test
