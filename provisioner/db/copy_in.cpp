#include "copy_in.hpp"

#include "errors.hpp"

#include <poll.h>

#include <cerrno>

namespace baton::db {

namespace {

constexpr std::size_t flushBytes = 1 << 20;
// Microseconds between 1970-01-01 and PostgreSQL's epoch 2000-01-01.
constexpr std::int64_t postgresEpochOffset = 946'684'800LL * 1'000'000LL;
constexpr char signature[] = { 'P', 'G', 'C', 'O', 'P', 'Y', '\n', '\xff', '\r', '\n', '\0' };

} // namespace

CopyIn::CopyIn(Connection& connection, std::string_view copySql)
    : connection_(connection)
{
    connection_.ensureSession();
    const std::string sql(copySql);
    if (!PQsendQuery(connection_.raw(), sql.c_str()))
        connection_.throwSendFailure("COPY");
    PgResultPtr result = connection_.awaitResult(connection_.callDeadline());
    if (PQresultStatus(result.get()) != PGRES_COPY_IN) {
        std::string message = result ? PQresultErrorMessage(result.get()) : PQerrorMessage(connection_.raw());
        connection_.drain();
        throw DbError("COPY did not start: " + message);
    }
    open_ = true;
    buffer_.reserve(flushBytes + 4096);
    buffer_.append(signature, sizeof signature);
    put32(0); // flags
    put32(0); // header extension length
}

CopyIn::~CopyIn()
{
    if (!open_ || !connection_.raw())
        return;
    // Abort: the server discards everything this COPY sent. Every wait has the call deadline; a
    // server that does not take the abort by then loses the session instead (abandon), which
    // aborts the COPY and its transaction on the server just the same.
    const auto deadline = connection_.callDeadline();
    try {
        int ended;
        while ((ended = PQputCopyEnd(connection_.raw(), "aborted by the client")) == 0)
            waitWritable(deadline);
        if (ended < 0) {
            connection_.abandon();
            return;
        }
        connection_.flushWithin(deadline, "COPY abort");
        connection_.drain();
    } catch (const DbError&) {
        connection_.abandon();
    }
}

void CopyIn::put32(std::uint32_t value)
{
    const char bytes[] = { static_cast<char>(value >> 24), static_cast<char>(value >> 16),
        static_cast<char>(value >> 8), static_cast<char>(value) };
    buffer_.append(bytes, 4);
}

void CopyIn::put64(std::uint64_t value)
{
    put32(static_cast<std::uint32_t>(value >> 32));
    put32(static_cast<std::uint32_t>(value));
}

void CopyIn::beginRow(std::int16_t fields)
{
    const auto count = static_cast<std::uint16_t>(fields);
    buffer_.push_back(static_cast<char>(count >> 8));
    buffer_.push_back(static_cast<char>(count));
    if (buffer_.size() >= flushBytes)
        flush();
}

void CopyIn::null()
{
    put32(0xffffffffu);
}

void CopyIn::int32(std::int32_t value)
{
    put32(4);
    put32(static_cast<std::uint32_t>(value));
}

void CopyIn::int64(std::int64_t value)
{
    put32(8);
    put64(static_cast<std::uint64_t>(value));
}

void CopyIn::text(std::string_view value)
{
    put32(static_cast<std::uint32_t>(value.size()));
    buffer_.append(value);
}

void CopyIn::timestamp(std::int64_t epochSeconds)
{
    // Callers pass checked times (the trace readers reject rows outside 1970..9999); a time whose
    // microseconds do not fit is a bug, and must not reach the server as a wrapped value.
    std::int64_t micros;
    if (__builtin_mul_overflow(epochSeconds, 1'000'000LL, &micros)
        || __builtin_sub_overflow(micros, postgresEpochOffset, &micros))
        throw DbError("COPY: the time " + std::to_string(epochSeconds) + " is out of range");
    int64(micros);
}

void CopyIn::waitWritable(std::chrono::steady_clock::time_point deadline)
{
    PGconn* conn = connection_.raw();
    const auto left
        = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
        // The server stopped reading: nothing can end this COPY politely (its end and its abort
        // would wait behind the unsent data), so the session is given up now.
        open_ = false;
        connection_.abandon();
        throw DbTimeout("COPY: the server did not accept data within "
            + std::to_string(connection_.options().callTimeout.count()) + " ms; the session was given up");
    }
    pollfd fd { PQsocket(conn), POLLOUT | POLLIN, 0 };
    if (::poll(&fd, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) < 0 && errno != EINTR)
        throw ConnectionLost("COPY: poll on the database socket failed");
    if ((fd.revents & POLLIN) && !PQconsumeInput(conn))
        connection_.throwSendFailure("COPY data");
}

void CopyIn::send(const char* data, std::size_t size)
{
    PGconn* conn = connection_.raw();
    const auto deadline = connection_.callDeadline();
    int sent;
    while ((sent = PQputCopyData(conn, data, static_cast<int>(size))) == 0)
        waitWritable(deadline);
    if (sent < 0)
        connection_.throwSendFailure("COPY data");
    int pending;
    while ((pending = PQflush(conn)) == 1)
        waitWritable(deadline);
    if (pending < 0)
        connection_.throwSendFailure("COPY data");
}

void CopyIn::flush()
{
    if (buffer_.empty())
        return;
    send(buffer_.data(), buffer_.size());
    buffer_.clear();
}

std::uint64_t CopyIn::finish()
{
    if (!open_)
        throw DbError("COPY already finished");
    buffer_.push_back('\xff'); // trailer: field count -1
    buffer_.push_back('\xff');
    flush();
    const auto deadline = connection_.callDeadline();
    int ended;
    while ((ended = PQputCopyEnd(connection_.raw(), nullptr)) == 0)
        waitWritable(deadline);
    open_ = false;
    int pending = ended < 0 ? -1 : 0;
    while (ended > 0 && (pending = PQflush(connection_.raw())) == 1)
        waitWritable(deadline);
    if (ended < 0 || pending < 0)
        connection_.throwSendFailure("COPY end");
    PgResultPtr result = connection_.awaitResult(connection_.callDeadline());
    connection_.drain();
    if (PQresultStatus(result.get()) != PGRES_COMMAND_OK)
        throw DbError(
            std::string("COPY failed: ") + (result ? PQresultErrorMessage(result.get()) : "no result"),
            result && PQresultErrorField(result.get(), PG_DIAG_SQLSTATE)
                ? PQresultErrorField(result.get(), PG_DIAG_SQLSTATE)
                : "");
    Result done(std::move(result));
    return done.affected();
}

} // namespace baton::db
