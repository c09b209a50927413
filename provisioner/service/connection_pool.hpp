// Database sessions for the HTTP threads: each request borrows one and gives it back, so requests run
// in parallel without sharing a libpq connection. Sessions are made on demand, up to `size`.
#pragma once

#include "db/connection.hpp"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace baton::service {

class ConnectionPool {
public:
    ConnectionPool(std::string conninfo, std::size_t size, db::ConnectionOptions options);

    class Lease {
    public:
        Lease(ConnectionPool& pool, std::unique_ptr<db::Connection> connection)
            : pool_(pool)
            , connection_(std::move(connection))
        { }
        ~Lease() { pool_.giveBack(std::move(connection_)); }
        Lease(const Lease&) = delete;
        Lease& operator=(const Lease&) = delete;
        db::Connection& operator*() { return *connection_; }

    private:
        ConnectionPool& pool_;
        std::unique_ptr<db::Connection> connection_;
    };

    // Throws db::DbError when no session can be made.
    Lease borrow();

private:
    void giveBack(std::unique_ptr<db::Connection> connection);

    std::string conninfo_;
    std::size_t size_;
    db::ConnectionOptions options_;
    std::mutex mutex_;
    std::condition_variable returned_;
    std::vector<std::unique_ptr<db::Connection>> idle_;
    std::size_t made_ = 0;
};

} // namespace baton::service
