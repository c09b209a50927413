#include "fields.hpp"

#include "common/utf8.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <utility>

namespace baton::trace {

std::string_view trim(std::string_view text)
{
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos)
        return {};
    const auto last = text.find_last_not_of(" \t");
    return text.substr(first, last - first + 1);
}

std::optional<std::int64_t> checkedAdd(std::int64_t a, std::int64_t b)
{
    std::int64_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return std::nullopt;
    return sum;
}

std::optional<std::int64_t> checkedMultiply(std::int64_t a, std::int64_t b)
{
    std::int64_t product;
    if (__builtin_mul_overflow(a, b, &product))
        return std::nullopt;
    return product;
}

std::optional<std::int32_t> toInt32(std::int64_t value)
{
    if (value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max())
        return std::nullopt;
    return static_cast<std::int32_t>(value);
}

std::optional<std::int64_t> parseInteger(std::string_view text)
{
    text = trim(text);
    if (!text.empty() && text.front() == '+')
        text.remove_prefix(1);
    std::int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return value;
}

std::int64_t daysFromCivil(std::int64_t year, unsigned month, unsigned day)
{
    // Howard Hinnant's algorithm.
    year -= month <= 2;
    const std::int64_t era = (year >= 0 ? year : year - 399) / 400;
    const auto yearOfEra = static_cast<unsigned>(year - era * 400);
    const unsigned dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
    const unsigned dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear;
    return era * 146097 + static_cast<std::int64_t>(dayOfEra) - 719468;
}

namespace {

bool digits(std::string_view text, std::size_t pos, std::size_t count, unsigned& value)
{
    value = 0;
    for (std::size_t i = pos; i < pos + count; ++i) {
        if (i >= text.size() || text[i] < '0' || text[i] > '9')
            return false;
        value = value * 10 + static_cast<unsigned>(text[i] - '0');
    }
    return true;
}

bool isLeap(unsigned year)
{
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

} // namespace

std::string formatTimestamp(std::int64_t epoch)
{
    const auto days = epoch >= 0 ? epoch / 86400 : (epoch - 86399) / 86400; // floor, also before 1970
    const std::chrono::year_month_day date { std::chrono::sys_days { std::chrono::days(days) } };
    const auto seconds = epoch - days * 86400;
    char text[64];
    std::snprintf(text, sizeof text, "%04d-%02u-%02u %02lld:%02lld:%02lld", static_cast<int>(date.year()),
        static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()),
        static_cast<long long>(seconds / 3600), static_cast<long long>(seconds / 60 % 60),
        static_cast<long long>(seconds % 60));
    return text;
}

std::optional<std::int64_t> parseTimestamp(std::string_view text)
{
    text = trim(text);
    // YYYY-MM-DDTHH:MM:SS
    if (text.size() != 19 || text[4] != '-' || text[7] != '-' || (text[10] != 'T' && text[10] != ' ')
        || text[13] != ':' || text[16] != ':')
        return std::nullopt;
    unsigned year, month, day, hour, minute, second;
    if (!digits(text, 0, 4, year) || !digits(text, 5, 2, month) || !digits(text, 8, 2, day)
        || !digits(text, 11, 2, hour) || !digits(text, 14, 2, minute) || !digits(text, 17, 2, second))
        return std::nullopt;
    static constexpr unsigned monthDays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (month < 1 || month > 12 || day < 1)
        return std::nullopt;
    const unsigned maxDay = monthDays[month - 1] + (month == 2 && isLeap(year) ? 1 : 0);
    if (day > maxDay || hour > 23 || minute > 59 || second > 60)
        return std::nullopt;
    return daysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
}

bool isUnsetTime(std::string_view text)
{
    text = trim(text);
    return text.empty() || text == "Unknown" || text == "None" || text == "N/A" || text == "unknown";
}

std::optional<std::int64_t> parseSlurmDuration(std::string_view text)
{
    text = trim(text);
    std::int64_t days = 0;
    if (auto dash = text.find('-'); dash != std::string_view::npos) {
        auto d = parseInteger(text.substr(0, dash));
        if (!d || *d < 0)
            return std::nullopt;
        days = *d;
        text.remove_prefix(dash + 1);
    }
    std::int64_t parts[3] = { 0, 0, 0 };
    int count = 0;
    while (true) {
        auto colon = text.find(':');
        auto part = parseInteger(text.substr(0, colon));
        if (!part || *part < 0 || count == 3)
            return std::nullopt;
        parts[count++] = *part;
        if (colon == std::string_view::npos)
            break;
        text.remove_prefix(colon + 1);
    }
    // Checked: "99999999999999-00:00:00" is a bad duration, not a wrapped one.
    auto sum = [](std::initializer_list<std::pair<std::int64_t, std::int64_t>> terms)
        -> std::optional<std::int64_t> {
        std::int64_t total = 0;
        for (auto [value, unit] : terms) {
            auto term = checkedMultiply(value, unit);
            auto next = term ? checkedAdd(total, *term) : std::nullopt;
            if (!next)
                return std::nullopt;
            total = *next;
        }
        return total;
    };
    if (count == 1) // "D-HH" or "MM"
        return days > 0 ? sum({ { days, 86400 }, { parts[0], 3600 } }) : sum({ { parts[0], 60 } });
    if (count == 2) // "D-HH:MM" or "MM:SS"
        return days > 0 ? sum({ { days, 86400 }, { parts[0], 3600 }, { parts[1], 60 } })
                        : sum({ { parts[0], 60 }, { parts[1], 1 } });
    return sum({ { days, 86400 }, { parts[0], 3600 }, { parts[1], 60 }, { parts[2], 1 } });
}

bool isValidUtf8(std::string_view text)
{
    // Control characters have no place in names; a tab does.
    return std::none_of(text.begin(), text.end(), [](unsigned char c) { return c < 0x20 && c != '\t'; })
        && text::validUtf8(text);
}

bool splitCsv(std::string_view row, std::vector<std::string_view>& out, std::string& scratch)
{
    out.clear();
    if (row.find('"') == std::string_view::npos) {
        splitOn(row, ',', out);
        return true;
    }
    // Every field is copied into `scratch`, reserved first: the copies are never longer than the row,
    // so the buffer does not move and the views stay valid.
    scratch.clear();
    scratch.reserve(row.size());
    std::size_t i = 0;
    for (;;) {
        const std::size_t start = scratch.size();
        if (i < row.size() && row[i] == '"') {
            ++i;
            for (;;) {
                if (i >= row.size())
                    return false; // the quote is never closed
                if (row[i] == '"') {
                    if (i + 1 < row.size() && row[i + 1] == '"') {
                        scratch += '"';
                        i += 2;
                        continue;
                    }
                    ++i;
                    break;
                }
                scratch += row[i++];
            }
            if (i < row.size() && row[i] != ',')
                return false; // text after the closing quote
        } else {
            const auto comma = row.find(',', i);
            const auto end = comma == std::string_view::npos ? row.size() : comma;
            const auto field = row.substr(i, end - i);
            if (field.find('"') != std::string_view::npos)
                return false; // a quote inside an unquoted field
            scratch.append(field);
            i = end;
        }
        out.emplace_back(scratch.data() + start, scratch.size() - start);
        if (i >= row.size())
            return true;
        ++i; // the comma
    }
}

bool endsInQuote(std::string_view row)
{
    // An escaped quote ("") counts twice, so an odd count means a quoted field is still open.
    std::size_t quotes = 0;
    for (char c : row)
        quotes += c == '"';
    return quotes % 2 == 1;
}

namespace {

std::optional<double> parseDecimal(std::string_view text)
{
    text = trim(text);
    if (text.empty() || text.front() == '+')
        return std::nullopt;
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value < 0)
        return std::nullopt;
    return value;
}

} // namespace

std::optional<std::int64_t> parseDecimalSeconds(std::string_view text)
{
    const auto value = parseDecimal(text);
    if (!value || *value > static_cast<double>(maxDurationSeconds))
        return std::nullopt;
    return std::llround(*value);
}

std::optional<std::int64_t> parseWholeCount(std::string_view text)
{
    const auto value = parseDecimal(text);
    if (!value || *value != std::floor(*value) || *value > 1e15)
        return std::nullopt;
    return static_cast<std::int64_t>(*value);
}

void splitOn(std::string_view text, char separator, std::vector<std::string_view>& out)
{
    out.clear();
    while (true) {
        auto pos = text.find(separator);
        out.push_back(text.substr(0, pos));
        if (pos == std::string_view::npos)
            return;
        text.remove_prefix(pos + 1);
    }
}

void splitWhitespace(std::string_view text, std::vector<std::string_view>& out)
{
    out.clear();
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && (text[i] == ' ' || text[i] == '\t'))
            ++i;
        if (i == text.size())
            break;
        std::size_t start = i;
        while (i < text.size() && text[i] != ' ' && text[i] != '\t')
            ++i;
        out.push_back(text.substr(start, i - start));
    }
}

} // namespace baton::trace
