// A query result: typed access to text-format fields. Columns are found by name (column()) once per
// result; a row reader keeps their numbers.
#pragma once

#include "pg_handles.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace baton::db {

class Result {
public:
    explicit Result(PgResultPtr result)
        : result_(std::move(result))
    { }

    int rows() const { return PQntuples(result_.get()); }
    int columns() const { return PQnfields(result_.get()); }
    // Rows changed by INSERT/UPDATE/DELETE/COPY.
    std::uint64_t affected() const;

    // The number of the column named `name` (as the statement's select list or its AS names it);
    // throws DbError when the result has none, so that a renamed column fails loudly.
    int column(std::string_view name) const;
    // The numbers of the columns `names`, each with `prefix` in front (for a statement that reads several
    // rows of one table side by side), in the order given.
    template<std::size_t N>
    std::array<int, N> columns(const std::array<std::string_view, N>& names, std::string_view prefix = "") const
    {
        std::array<int, N> numbers {};
        for (std::size_t i = 0; i < N; ++i)
            numbers[i] = column(std::string(prefix) + std::string(names[i]));
        return numbers;
    }

    bool isNull(int row, int column) const { return PQgetisnull(result_.get(), row, column) != 0; }
    std::string_view text(int row, int column) const;
    // These throw DbError for NULL or unparsable values; the opt* forms map NULL to nullopt.
    std::int64_t int64(int row, int column) const;
    double real(int row, int column) const;
    bool boolean(int row, int column) const;
    nlohmann::json json(int row, int column) const;
    std::optional<std::string> optText(int row, int column) const;
    std::optional<std::int64_t> optInt64(int row, int column) const;
    std::optional<double> optReal(int row, int column) const;

    // The first row as `toRecord(result, row)` makes it; nullopt for an empty result.
    template<typename ToRecord>
    auto first(ToRecord toRecord) const -> std::optional<std::invoke_result_t<ToRecord&, const Result&, int>>
    {
        if (rows() == 0)
            return std::nullopt;
        return toRecord(*this, 0);
    }
    // Every row as `toRecord(result, row)` makes it, in order.
    template<typename ToRecord>
    auto all(ToRecord toRecord) const -> std::vector<std::invoke_result_t<ToRecord&, const Result&, int>>
    {
        std::vector<std::invoke_result_t<ToRecord&, const Result&, int>> records;
        records.reserve(rows());
        for (int row = 0; row < rows(); ++row)
            records.push_back(toRecord(*this, row));
        return records;
    }

    PGresult* get() const { return result_.get(); }

private:
    PgResultPtr result_;
};

} // namespace baton::db
