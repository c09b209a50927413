#include "connection.hpp"

#include "errors.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace baton::db {

namespace {

using Clock = std::chrono::steady_clock;

std::string trimmed(const char* message)
{
    std::string text(message ? message : "");
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.pop_back();
    return text;
}

} // namespace

Connection::Connection(std::string conninfo, ConnectionOptions options)
    : conninfo_(std::move(conninfo))
    , options_(options)
{
    connectWithBackoff();
}

PgConnPtr Connection::connectOnce(std::string& error) const
{
    // connect_timeout first, so that one given in the connection string wins.
    const std::string timeout = std::to_string(std::max<long long>(2, options_.connectTimeout.count()));
    const char* keys[] = { "connect_timeout", "application_name", "dbname", nullptr };
    const char* values[] = { timeout.c_str(), "baton", conninfo_.c_str(), nullptr };
    PgConnPtr conn(PQconnectdbParams(keys, values, 1));
    if (!conn) {
        error = "out of memory";
        return nullptr;
    }
    if (PQstatus(conn.get()) != CONNECTION_OK) {
        error = trimmed(PQerrorMessage(conn.get()));
        return nullptr;
    }
    // Server notices ("relation already exists, skipping") are not errors; keep them off stderr.
    PQsetNoticeProcessor(
        conn.get(), [](void*, const char*) {}, nullptr);
    // Non-blocking for the whole session: libpq never waits on the socket by itself, every wait is a
    // poll of ours with a deadline (see flushWithin, awaitResult).
    if (PQsetnonblocking(conn.get(), 1) != 0) {
        error = "cannot make the connection non-blocking: " + trimmed(PQerrorMessage(conn.get()));
        return nullptr;
    }
    return conn;
}

void Connection::connectWithBackoff()
{
    prepared_.clear();
    conn_.reset();
    poisoned_ = false;
    const auto giveUp = Clock::now() + options_.reconnectFor;
    auto backoff = options_.firstBackoff;
    std::string error;
    for (int attempt = 1;; ++attempt) {
        if (auto conn = connectOnce(error)) {
            conn_ = std::move(conn);
            poisoned_ = false;
            try {
                configureSession();
                ++session_;
                return;
            } catch (const DbError& failure) {
                error = failure.what();
                conn_.reset();
            }
        }
        if (Clock::now() + backoff > giveUp)
            throw ConnectionLost(
                "cannot connect to PostgreSQL after " + std::to_string(attempt) + " attempts: " + error);
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, options_.maxBackoff);
    }
}

void Connection::configureSession()
{
    // The server-side limit on every statement, bound as a parameter like everything else. JIT off: it
    // compiles a query the planner thinks costly (on a large history, estimates easily pass its
    // threshold) for 100-200 ms, and the service's queries run in milliseconds.
    const std::string limit = std::to_string(options_.statementTimeout.count());
    const char* params[] = { limit.c_str() };
    if (!PQsendQueryParams(conn_.get(),
            "SELECT set_config('statement_timeout', $1, false), set_config('jit', 'off', false)", 1, nullptr,
            params, nullptr, nullptr, 0))
        throwSendFailure("session setup");
    finish(nullptr, "session setup");
}

void Connection::reconnect()
{
    connectWithBackoff();
}

bool Connection::cancel(Clock::time_point deadline)
{
    std::shared_ptr<PGcancel> handle(PQgetCancel(conn_.get()), PQfreeCancel);
    if (!handle)
        return false;
    // PQcancel connects to the server and waits for it to close that connection, with no timeout of
    // its own. On a thread, it can only keep that thread (and the handle it shares) past the deadline.
    auto sent = std::make_shared<std::promise<bool>>();
    auto result = sent->get_future();
    std::thread([handle, sent] {
        char error[256];
        sent->set_value(PQcancel(handle.get(), error, sizeof error) == 1);
    }).detach();
    return result.wait_until(deadline) == std::future_status::ready && result.get();
}

std::chrono::milliseconds Connection::cancelGrace() const
{
    return std::clamp(
        options_.callTimeout / 2, std::chrono::milliseconds(200), std::chrono::milliseconds(5000));
}

void Connection::abandon() noexcept
{
    if (conn_) {
        if (const int socket = PQsocket(conn_.get()); socket >= 0)
            ::shutdown(socket, SHUT_RDWR);
        conn_.reset();
    }
    prepared_.clear();
    poisoned_ = true;
}

void Connection::flushWithin(Clock::time_point deadline, const char* what)
{
    PGconn* conn = conn_.get();
    int pending;
    while ((pending = PQflush(conn)) == 1) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            abandon();
            throw DbTimeout(std::string(what) + ": the server did not accept data within "
                + std::to_string(options_.callTimeout.count()) + " ms; the session was given up");
        }
        // Read too while waiting: the server may have to send before it reads again.
        pollfd fd { PQsocket(conn), POLLOUT | POLLIN, 0 };
        if (::poll(&fd, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) < 0 && errno != EINTR)
            throw ConnectionLost(std::string(what) + ": poll on the database socket failed");
        if ((fd.revents & POLLIN) && !PQconsumeInput(conn))
            throwSendFailure(what);
    }
    if (pending < 0)
        throwSendFailure(what);
}

PgResultPtr Connection::awaitResult(Clock::time_point deadline)
{
    PGconn* conn = conn_.get();
    if (!conn)
        return nullptr;
    flushWithin(deadline, "sending the call");
    while (PQisBusy(conn)) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            // Cancel, then give the cancelled call a moment to end; both within one grace period.
            // If it does not end, the session is given up (the next call reconnects).
            const auto grace = Clock::now() + cancelGrace();
            bool clean = cancel(grace);
            while (clean) {
                while (PQisBusy(conn) && Clock::now() < grace) {
                    const auto wait
                        = std::chrono::duration_cast<std::chrono::milliseconds>(grace - Clock::now());
                    pollfd fd { PQsocket(conn), POLLIN, 0 };
                    if ((::poll(&fd, 1, static_cast<int>(std::clamp<long long>(wait.count(), 1, 100))) < 0
                            && errno != EINTR)
                        || !PQconsumeInput(conn))
                        break;
                }
                if (PQisBusy(conn)) {
                    clean = false;
                    break;
                }
                PgResultPtr rest(PQgetResult(conn));
                if (!rest)
                    break;
                // A COPY that the cancel ended leaves the session in COPY state: only a new one helps.
                if (PQresultStatus(rest.get()) == PGRES_COPY_IN
                    || PQresultStatus(rest.get()) == PGRES_COPY_OUT) {
                    clean = false;
                    break;
                }
            }
            if (!clean)
                abandon();
            throw DbTimeout("the database call did not finish within "
                + std::to_string(options_.callTimeout.count()) + " ms and was cancelled");
        }
        pollfd fd { PQsocket(conn), POLLIN, 0 };
        const int ready = ::poll(&fd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (ready < 0 && errno != EINTR)
            throw ConnectionLost("poll on the database socket failed");
        if (!PQconsumeInput(conn))
            throw ConnectionLost("lost the database connection: " + trimmed(PQerrorMessage(conn)));
    }
    return PgResultPtr(PQgetResult(conn));
}

Result Connection::finish(PgResultPtr first, const char* what)
{
    // Collect every result of the call; the last one (or the first error) is the answer.
    PgResultPtr answer = std::move(first);
    const auto deadline = callDeadline();
    for (;;) {
        PgResultPtr next = awaitResult(deadline);
        if (!next)
            break;
        const auto status = PQresultStatus(next.get());
        if (status == PGRES_COPY_IN || status == PGRES_COPY_OUT) {
            answer = std::move(next);
            break;
        }
        if (!answer || PQresultStatus(answer.get()) != PGRES_FATAL_ERROR)
            answer = std::move(next);
    }
    if (!answer) {
        if (broken())
            throw ConnectionLost(std::string(what)
                + ": lost the database connection: " + trimmed(PQerrorMessage(conn_.get())));
        throw DbError(std::string(what) + ": no result");
    }
    const auto status = PQresultStatus(answer.get());
    if (status == PGRES_FATAL_ERROR || status == PGRES_BAD_RESPONSE || status == PGRES_NONFATAL_ERROR) {
        const char* state = PQresultErrorField(answer.get(), PG_DIAG_SQLSTATE);
        std::string message = std::string(what) + ": " + trimmed(PQresultErrorMessage(answer.get()));
        if (broken() || !state)
            throw ConnectionLost(message);
        if (std::string_view(state) == "57014")
            throw DbTimeout(message, state);
        throw DbError(message, state);
    }
    return Result(std::move(answer));
}

void Connection::drain()
{
    const auto deadline = callDeadline();
    while (awaitResult(deadline)) { }
}

void Connection::throwSendFailure(const char* what)
{
    const std::string message = std::string(what) + ": " + trimmed(PQerrorMessage(conn_.get()));
    if (broken())
        throw ConnectionLost(message);
    throw DbError(message);
}

void Connection::prepare(const Statement& statement)
{
    if (prepared_.count(statement.name))
        return;
    if (!PQsendPrepare(conn_.get(), statement.name, statement.sql, 0, nullptr))
        throwSendFailure(statement.name);
    finish(nullptr, statement.name);
    prepared_.insert(statement.name);
}

Result Connection::execOnce(const Statement& statement, const Params& params)
{
    if (broken())
        throw ConnectionLost("not connected");
    prepare(statement);
    std::vector<const char*> values;
    values.reserve(params.values().size());
    for (const auto& value : params.values())
        values.push_back(value ? value->c_str() : nullptr);
    if (!PQsendQueryPrepared(
            conn_.get(), statement.name, static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0))
        throwSendFailure(statement.name);
    return finish(nullptr, statement.name);
}

void Connection::ensureSession()
{
    if (!broken())
        return;
    if (transactionOpen_)
        throw ConnectionLost(
            "the database connection was lost inside a transaction; the transaction is void");
    reconnect(); // nothing has been sent yet, so this is safe for any statement
}

Result Connection::exec(const Statement& statement, const Params& params)
{
    ensureSession();
    try {
        return execOnce(statement, params);
    } catch (const ConnectionLost&) {
        if (transactionOpen_)
            throw; // the transaction died with the session; the caller must start over
        // The statement may or may not have run: only retryable ones are sent again.
        reconnect();
        if (!statement.retryable)
            throw;
        return execOnce(statement, params);
    }
}

Result Connection::execScript(std::string_view sql)
{
    ensureSession();
    const std::string text(sql);
    if (!PQsendQuery(conn_.get(), text.c_str()))
        throwSendFailure("SQL script");
    return finish(nullptr, "SQL script");
}

void Connection::beginTransaction()
{
    if (transactionOpen_)
        throw DbError("a transaction is already open on this connection");
    execScript("BEGIN");
    transactionOpen_ = true;
}

void Connection::commitTransaction()
{
    if (!transactionOpen_)
        throw DbError("no transaction is open");
    try {
        execScript("COMMIT");
    } catch (...) {
        transactionOpen_ = false;
        throw;
    }
    transactionOpen_ = false;
}

void Connection::rollbackTransaction() noexcept
{
    if (!transactionOpen_)
        return;
    transactionOpen_ = false;
    if (broken())
        return; // a lost session rolled back on the server
    try {
        execScript("ROLLBACK");
    } catch (const DbError&) {
        poisoned_ = true; // unknown state: start afresh on the next call
    }
}

} // namespace baton::db
