#include "values.hpp"

#include "common/baton_contract.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace baton::spank {

namespace {

std::string quoted(std::string_view text)
{
    return "'" + std::string(text) + "'";
}

double parseNumber(std::string_view text, const std::string& what)
{
    double value = 0;
    const auto* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
        throw std::invalid_argument(what + ", got " + quoted(text));
    }
    return value;
}

long long parseInteger(std::string_view text, long long low, long long high, const std::string& what)
{
    long long value = 0;
    const auto* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end || value < low || value > high) {
        throw std::invalid_argument(what + ", got " + quoted(text));
    }
    return value;
}

} // namespace

double parseOverheadPercent(std::string_view text)
{
    const std::string what = "overhead must be a percentage greater than 0 and less than 100";
    const double value = parseNumber(text, what);
    if (!contract::overheadInRange(value)) {
        throw std::invalid_argument(what + ", got " + quoted(text));
    }
    return value;
}

int parseMarginSeconds(std::string_view text)
{
    return static_cast<int>(parseInteger(text, static_cast<long long>(contract::kMarginMin),
        static_cast<long long>(contract::kMarginMax),
        "margin must be a whole number of seconds from 0 to "
            + std::to_string(static_cast<long long>(contract::kMarginMax))));
}

std::chrono::milliseconds parseTimeoutSeconds(std::string_view text)
{
    const std::string what = "timeout must be a number of seconds from 0.01 to 60";
    const double value = parseNumber(text, what);
    if (value < 0.01 || value > 60) {
        throw std::invalid_argument(what + ", got " + quoted(text));
    }
    return std::chrono::milliseconds(static_cast<long long>(std::llround(value * 1000)));
}

int parseKeepCount(std::string_view text)
{
    return static_cast<int>(parseInteger(text, contract::kKeepMin, contract::kKeepMax,
        "keep must be a whole number from " + std::to_string(contract::kKeepMin) + " to "
            + std::to_string(contract::kKeepMax)));
}

int parseDrainRate(std::string_view text)
{
    return static_cast<int>(parseInteger(text, 0, static_cast<long long>(contract::kDrainRateMax),
        "drain rate must be a whole number of MB/s from 0 (unbounded) to "
            + std::to_string(static_cast<long long>(contract::kDrainRateMax))));
}

int parseHandoverWaitSeconds(std::string_view text)
{
    return static_cast<int>(parseInteger(text, static_cast<long long>(contract::kHandoverWaitMin),
        static_cast<long long>(contract::kHandoverWaitMax),
        "handover wait must be a whole number of seconds from 0 to "
            + std::to_string(static_cast<long long>(contract::kHandoverWaitMax))));
}

int parseChainSeq(std::string_view text)
{
    return static_cast<int>(parseInteger(text, 0, std::numeric_limits<int>::max(),
        "seq must be a whole number from 0 to " + std::to_string(std::numeric_limits<int>::max())));
}

bool isValidChainName(std::string_view name)
{
    return contract::validChainName(name);
}

void validateChainName(std::string_view name)
{
    if (!isValidChainName(name)) {
        throw std::invalid_argument("chain name must be " + contract::chainNameRule() + ", got " + quoted(name));
    }
}

std::string chainNameFromJobName(std::string_view jobName)
{
    std::string name;
    for (char c : jobName.substr(0, contract::kChainNameMax)) {
        name += contract::isChainNameCharacter(c) ? c : '_';
    }
    if (!name.empty() && (name.front() == '.' || name.front() == '-')) {
        name.front() = '_';
    }
    return name.empty() ? "job" : name;
}

} // namespace baton::spank
