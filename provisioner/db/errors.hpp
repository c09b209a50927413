// Errors of the data layer. Every libpq failure becomes one of these, with the server's message.
#pragma once

#include <stdexcept>
#include <string>

namespace baton::db {

class DbError : public std::runtime_error {
public:
    explicit DbError(const std::string& message, std::string sqlState = {})
        : std::runtime_error(message)
        , sqlState_(std::move(sqlState))
    { }
    // The five-character SQLSTATE when the server sent one (e.g. "23505" unique violation).
    const std::string& sqlState() const { return sqlState_; }

private:
    std::string sqlState_;
};

// The connection broke (server restart, network): the call may be retried on a new connection.
class ConnectionLost : public DbError {
public:
    using DbError::DbError;
};

// A call did not finish before its deadline; it was cancelled on the server.
class DbTimeout : public DbError {
public:
    using DbError::DbError;
};

} // namespace baton::db
