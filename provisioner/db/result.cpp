#include "result.hpp"

#include "errors.hpp"

#include <charconv>
#include <cstdlib>

namespace baton::db {

namespace {

[[noreturn]] void badField(const PGresult* result, int row, int column, const char* what)
{
    throw DbError(
        std::string("column ") + PQfname(result, column) + " of row " + std::to_string(row) + " is " + what);
}

} // namespace

std::uint64_t Result::affected() const
{
    const char* count = PQcmdTuples(result_.get());
    return count && *count ? std::strtoull(count, nullptr, 10) : 0;
}

int Result::column(std::string_view name) const
{
    const int number = PQfnumber(result_.get(), std::string(name).c_str());
    if (number < 0)
        throw DbError("the result has no column " + std::string(name));
    return number;
}

std::string_view Result::text(int row, int column) const
{
    return { PQgetvalue(result_.get(), row, column),
        static_cast<std::size_t>(PQgetlength(result_.get(), row, column)) };
}

std::int64_t Result::int64(int row, int column) const
{
    if (isNull(row, column))
        badField(result_.get(), row, column, "NULL");
    const auto value = text(row, column);
    std::int64_t out = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), out);
    if (error != std::errc() || end != value.data() + value.size())
        badField(result_.get(), row, column, "not an integer");
    return out;
}

double Result::real(int row, int column) const
{
    if (isNull(row, column))
        badField(result_.get(), row, column, "NULL");
    const std::string value(text(row, column));
    char* end = nullptr;
    const double out = std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size())
        badField(result_.get(), row, column, "not a number");
    return out;
}

bool Result::boolean(int row, int column) const
{
    if (isNull(row, column))
        badField(result_.get(), row, column, "NULL");
    return text(row, column) == "t";
}

nlohmann::json Result::json(int row, int column) const
{
    if (isNull(row, column))
        return nullptr;
    auto parsed = nlohmann::json::parse(text(row, column), nullptr, false);
    if (parsed.is_discarded())
        badField(result_.get(), row, column, "not JSON");
    return parsed;
}

std::optional<std::string> Result::optText(int row, int column) const
{
    if (isNull(row, column))
        return std::nullopt;
    return std::string(text(row, column));
}

std::optional<std::int64_t> Result::optInt64(int row, int column) const
{
    if (isNull(row, column))
        return std::nullopt;
    return int64(row, column);
}

std::optional<double> Result::optReal(int row, int column) const
{
    if (isNull(row, column))
        return std::nullopt;
    return real(row, column);
}

} // namespace baton::db
