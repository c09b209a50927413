// The base of a table store: the code of one table (its named statements, its row type and the reader
// that takes a row's columns by name) over a borrowed Connection. Table stores sit above the
// connection/result layer and below whatever combines tables.
#pragma once

#include "connection.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace baton::db {

class TableStore {
public:
    explicit TableStore(Connection& connection)
        : connection_(connection)
    { }

protected:
    Connection& connection_;
};

// The client's clock in epoch seconds, for rows stamped with the time their writer decided.
inline std::int64_t epochSeconds()
{
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// SQL text joined at compile time from named parts (a shared select list and each statement's own
// clauses), so that a Statement can point at it: `constexpr auto sql = joinSql(columns, " WHERE ...");`.
template<std::size_t... Sizes> consteval auto joinSql(const char (&... parts)[Sizes])
{
    std::array<char, (Sizes + ...) - sizeof...(Sizes) + 1> text {};
    std::size_t at = 0;
    ((std::copy_n(parts, Sizes - 1, text.begin() + at), at += Sizes - 1), ...);
    return text;
}

} // namespace baton::db
