// COPY ... FROM STDIN (FORMAT binary): rows are encoded here and streamed in large chunks, so a bulk
// load needs no escaping and no per-row round trip. If finish() is not reached the COPY is aborted
// and nothing it sent is kept.
#pragma once

#include "connection.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace baton::db {

class CopyIn {
public:
    // `copySql` is a COPY ... FROM STDIN WITH (FORMAT binary) statement.
    CopyIn(Connection& connection, std::string_view copySql);
    ~CopyIn();
    CopyIn(const CopyIn&) = delete;
    CopyIn& operator=(const CopyIn&) = delete;

    void beginRow(std::int16_t fields);
    void null();
    void int32(std::int32_t value);
    void int64(std::int64_t value);
    void text(std::string_view value);
    // Epoch seconds (UTC) as a timestamptz.
    void timestamp(std::int64_t epochSeconds);

    // Ends the COPY; returns the rows the server stored.
    std::uint64_t finish();

private:
    void put32(std::uint32_t value);
    void put64(std::uint64_t value);
    void flush();
    void send(const char* data, std::size_t size);
    void waitWritable(std::chrono::steady_clock::time_point deadline);

    Connection& connection_;
    std::string buffer_;
    bool open_ = false;
};

} // namespace baton::db
