#include "copy_in.hpp"

#include "errors.hpp"

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
    if (!open_)
        return;
    // Abort: the server discards everything this COPY sent.
    if (PQputCopyEnd(connection_.raw(), "aborted by the client") == 1) {
        try {
            connection_.drain();
        } catch (const DbError&) { }
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
    int64(epochSeconds * 1'000'000LL - postgresEpochOffset);
}

void CopyIn::flush()
{
    if (buffer_.empty())
        return;
    if (PQputCopyData(connection_.raw(), buffer_.data(), static_cast<int>(buffer_.size())) != 1)
        connection_.throwSendFailure("COPY data");
    buffer_.clear();
}

std::uint64_t CopyIn::finish()
{
    if (!open_)
        throw DbError("COPY already finished");
    buffer_.push_back('\xff'); // trailer: field count -1
    buffer_.push_back('\xff');
    flush();
    open_ = false;
    if (PQputCopyEnd(connection_.raw(), nullptr) != 1)
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
