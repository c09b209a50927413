// One PostgreSQL session: prepared statements with bound parameters, a deadline on every call,
// reconnection with backoff. Not thread-safe; use one Connection per thread.
#pragma once

#include "params.hpp"
#include "pg_handles.hpp"
#include "result.hpp"

#include <chrono>
#include <set>
#include <string>
#include <string_view>

namespace baton::db {

// A statement known by name; prepared once per session on first use. `retryable` statements are
// re-sent once on a new session when the connection was lost (reads and idempotent writes only).
struct Statement {
    const char* name;
    const char* sql;
    bool retryable = false;
};

struct ConnectionOptions {
    std::chrono::seconds connectTimeout { 10 }; // per connection attempt (libpq connect_timeout)
    std::chrono::milliseconds statementTimeout { 60'000 }; // server-side statement_timeout
    std::chrono::milliseconds callTimeout { 90'000 }; // client-side deadline of every call
    std::chrono::milliseconds reconnectFor { 30'000 }; // how long to keep retrying a lost connection
    std::chrono::milliseconds firstBackoff { 100 };
    std::chrono::milliseconds maxBackoff { 3'200 };
};

class Connection {
public:
    // Connects, retrying with backoff for options.reconnectFor. `conninfo` is a libpq connection
    // string or URI; an empty one uses the PG* environment.
    explicit Connection(std::string conninfo, ConnectionOptions options = {});

    // Runs a prepared statement.
    Result exec(const Statement& statement, const Params& params = Params());
    // Runs SQL text without parameters, possibly several statements (migrations, BEGIN/COMMIT).
    Result execScript(std::string_view sql);

    // Used by Transaction. While a transaction is open, calls are never retried on another session,
    // and once its session is lost every call fails until the transaction ends.
    void beginTransaction();
    void commitTransaction();
    void rollbackTransaction() noexcept;
    bool inTransaction() const { return transactionOpen_; }
    // Reconnects if the session broke outside a transaction; throws ConnectionLost inside one.
    void ensureSession();
    // Drops the session and connects anew (with backoff).
    void reconnect();
    int serverVersion() const { return PQserverVersion(conn_.get()); }
    // Counts the sessions this connection has opened: a session setting made under one number holds
    // until the number changes.
    std::uint64_t session() const { return session_; }
    PGconn* raw() const { return conn_.get(); }
    const ConnectionOptions& options() const { return options_; }

    // For COPY: waits until a result is ready, within the call deadline.
    PgResultPtr awaitResult(std::chrono::steady_clock::time_point deadline);
    std::chrono::steady_clock::time_point callDeadline() const
    {
        return std::chrono::steady_clock::now() + options_.callTimeout;
    }
    // Reads and discards the results still pending from the last call.
    void drain();
    // Sends what libpq still holds for the server, by `deadline`. The session is non-blocking
    // throughout: a server that stops reading cannot stall a send past its deadline. On timeout the
    // session is abandoned and DbTimeout names `what`.
    void flushWithin(std::chrono::steady_clock::time_point deadline, const char* what);
    // Gives the session up at once: the socket is shut down (so that nothing waits on it, not even
    // libpq's goodbye) and closed; the server ends the backend and rolls back what was open. The next
    // call reconnects. For a server that no longer answers.
    void abandon() noexcept;
    // Throws ConnectionLost or DbError for a failed send.
    [[noreturn]] void throwSendFailure(const char* what);

private:
    PgConnPtr connectOnce(std::string& error) const;
    void connectWithBackoff();
    void configureSession();
    void prepare(const Statement& statement);
    Result finish(PgResultPtr result, const char* what);
    Result execOnce(const Statement& statement, const Params& params);
    // Asks the server to cancel the running call; false if that could not be done by `deadline`
    // (PQcancel itself blocks on a stalled server, so it runs on a thread of its own).
    bool cancel(std::chrono::steady_clock::time_point deadline);
    // How long a cancelled call may take to end before the session is given up.
    std::chrono::milliseconds cancelGrace() const;
    bool broken() const { return poisoned_ || PQstatus(conn_.get()) != CONNECTION_OK; }

    std::string conninfo_;
    ConnectionOptions options_;
    PgConnPtr conn_;
    std::set<std::string, std::less<>> prepared_;
    bool poisoned_ = false;
    bool transactionOpen_ = false;
    std::uint64_t session_ = 0;
};

} // namespace baton::db
