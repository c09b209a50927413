// Parsing of single fields shared by the readers. Every parser returns nullopt for text it does not
// accept, so that the caller can reject the row with a reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace baton::trace {

// The range of times a trace job may carry: 1970-01-01 up to 9999-12-31 23:59:59 UTC. Anything else
// is a broken field (a submit time of 10^13 seconds), and would overflow the microseconds of a
// PostgreSQL timestamp.
inline constexpr std::int64_t maxEpochSeconds = 253'402'300'799;
// Durations (time limit, run time, wait) are at most that long as well.
inline constexpr std::int64_t maxDurationSeconds = maxEpochSeconds;

std::string_view trim(std::string_view text);
// a + b, a * b; nullopt instead of an overflow.
std::optional<std::int64_t> checkedAdd(std::int64_t a, std::int64_t b);
std::optional<std::int64_t> checkedMultiply(std::int64_t a, std::int64_t b);
// `value` as an int32_t; nullopt if it does not fit.
std::optional<std::int32_t> toInt32(std::int64_t value);
std::optional<std::int64_t> parseInteger(std::string_view text);
// "2022-11-01T15:34:14" (also with a space instead of 'T'), read as UTC. Not a time: nullopt.
std::optional<std::int64_t> parseTimestamp(std::string_view text);
// The reverse: seconds since the epoch as "2022-11-01 15:34:14" (UTC).
std::string formatTimestamp(std::int64_t epoch);
// "Unknown", "None", "N/A" or empty: Slurm's ways of saying a time is not set.
bool isUnsetTime(std::string_view text);
// Slurm durations "[D-]HH:MM:SS", "MM:SS", "MM" (minutes) -> seconds. "UNLIMITED" etc.: nullopt.
std::optional<std::int64_t> parseSlurmDuration(std::string_view text);
// Days since 1970-01-01 of a civil date (proleptic Gregorian).
std::int64_t daysFromCivil(std::int64_t year, unsigned month, unsigned day);
// Strict UTF-8 (text::validUtf8) without control characters other than a tab: a valid name or field.
bool isValidUtf8(std::string_view text);
// One CSV row (RFC 4180): fields split on commas; a field in double quotes may hold commas, line breaks
// and "" for a quote. Fields without quotes are views into `row`; unquoted copies of quoted ones go
// into `scratch` (which must not change until the views are used). False if a quote is left open or
// text follows a closing quote.
bool splitCsv(std::string_view row, std::vector<std::string_view>& out, std::string& scratch);
// True if `row` ends inside a quoted field (an odd number of quotes): the row goes on on the next line.
bool endsInQuote(std::string_view row);
// A decimal number of seconds or a count written as "172800" or "172800.0" (as CSV exports of float
// columns write them); seconds are rounded to the nearest whole second. Negative, not finite, or
// not a number: nullopt.
std::optional<std::int64_t> parseDecimalSeconds(std::string_view text);
// A count that must be whole: "36" or "36.0"; "36.5", negative or not a number: nullopt.
std::optional<std::int64_t> parseWholeCount(std::string_view text);
// Splits on every occurrence of `separator` (empty fields kept).
void splitOn(std::string_view text, char separator, std::vector<std::string_view>& out);
// Splits on runs of spaces and tabs (no empty fields).
void splitWhitespace(std::string_view text, std::vector<std::string_view>& out);

} // namespace baton::trace
