// Parsing and validation of the values users and administrators give the plugin: chain names,
// overhead percentages, margins, timeouts. Shared by the option callbacks and the plugstack parser.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace baton::spank {

// Each parser throws std::invalid_argument with a message that names the value's meaning. The ranges of
// the values that become BATON_* variables are the contract's (common/baton_contract.hpp).
double parseOverheadPercent(std::string_view text); // > 0 and < 100
int parseMarginSeconds(std::string_view text); // integer, 0 .. 86400
std::chrono::milliseconds parseTimeoutSeconds(std::string_view text); // 0.01 .. 60, fractions allowed
int parseKeepCount(std::string_view text); // integer, 1 .. 1000
int parseDrainRate(std::string_view text); // whole MB/s, 0 (unbounded) .. contract::kDrainRateMax
int parseHandoverWaitSeconds(std::string_view text); // integer, 0 .. 3600
int parseChainSeq(std::string_view text); // integer, 0 .. INT_MAX

// A chain name follows the one rule batond applies too (contract::validChainName: 1..128 characters of
// [A-Za-z0-9._-], not starting with '.' or '-'), so that it is always a single, harmless path component.
bool isValidChainName(std::string_view name);
void validateChainName(std::string_view name); // throws std::invalid_argument

// Turns a job name into a valid chain name: invalid characters become '_'; empty becomes "job".
std::string chainNameFromJobName(std::string_view jobName);

} // namespace baton::spank
