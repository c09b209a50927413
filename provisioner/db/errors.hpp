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

// Whether the server refused this statement's data (a constraint, a value out of range, ...) rather than
// failing as a service (connection, resources, shutdown, a conflict worth retrying): a refused row belongs
// to whoever wrote it and must not stop the work of everyone else.
inline bool isChainDataError(const DbError& error)
{
    if (dynamic_cast<const ConnectionLost*>(&error) || dynamic_cast<const DbTimeout*>(&error))
        return false;
    const std::string& state = error.sqlState();
    if (state.size() != 5)
        return false; // no answer from the server: the connection
    const std::string serviceClasses[] = { "08", "25", "40", "53", "55", "57", "58", "XX" };
    for (const std::string& serviceClass : serviceClasses)
        if (state.compare(0, 2, serviceClass) == 0)
            return false;
    return true;
}

} // namespace baton::db
