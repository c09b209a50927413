#include "baton/ckpt/options.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/error.hpp"
#include "common/baton_contract.hpp"

namespace baton::ckpt {

static_assert(kMaxHandoverWait == contract::kHandoverWaitMax, "options.hpp states the contract's bound");

namespace {

// Strict: the whole string must be a decimal number in range.
int parseKeep(const char* text, const char* name = "BATON_KEEP")
{
    std::string value(text);
    char* end = nullptr;
    errno = 0;
    long keep = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE || !contract::keepInRange(keep))
        throw ConfigError(std::string(name) + "='" + value + "' is not a whole number of checkpoints from "
            + std::to_string(contract::kKeepMin) + " to " + std::to_string(contract::kKeepMax));
    return static_cast<int>(keep);
}

std::optional<std::uint64_t> parseWhole(const char* text)
{
    std::string value(text);
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    char* end = nullptr;
    errno = 0;
    unsigned long long number = std::strtoull(value.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return std::nullopt;
    return number;
}

std::uint64_t parseWholeVariable(const char* name, const char* text)
{
    auto number = parseWhole(text);
    if (!number)
        throw ConfigError(std::string(name) + "='" + text + "' is not a whole number");
    return *number;
}

struct Variable {
    const char* name;
    const char* value; // nullptr: unset
};

// BATON_CHAIN_SEQ, or where that is unset its deprecated alias BATON_RESTART_COUNT (set by plugins of
// earlier releases).
Variable chainSeqVariable()
{
    if (const char* seq = std::getenv(contract::kChainSeqVar); seq != nullptr)
        return { contract::kChainSeqVar, seq };
    return { contract::kLegacyRestartCountVar, std::getenv(contract::kLegacyRestartCountVar) };
}

double parseHandoverWait(const char* text)
{
    std::string value(text);
    char* end = nullptr;
    errno = 0;
    double seconds = std::strtod(value.c_str(), &end);
    // "!(a <= b)" also refuses NaN.
    if (value.empty() || *end != '\0' || errno == ERANGE || !contract::handoverWaitInRange(seconds))
        throw ConfigError("BATON_HANDOVER_WAIT='" + value + "' is not a number of seconds in 0.."
            + std::to_string(static_cast<int>(kMaxHandoverWait)));
    return seconds;
}

double parseDrainRate(const char* text)
{
    std::string value(text);
    char* end = nullptr;
    errno = 0;
    double megabytes = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno == ERANGE || !(megabytes >= 0 && megabytes <= contract::kDrainRateMax))
        throw ConfigError("BATON_DRAIN_MBPS='" + value + "' is not a rate in MB/s from 0 (unbounded) to 1e7");
    return megabytes * 1e6;
}

std::optional<std::uint64_t> environmentNumber(const char* name)
{
    const char* text = std::getenv(name);
    return text != nullptr ? parseWhole(text) : std::nullopt;
}

} // namespace

void Options::identifyFromEnvironment()
{
    if (!jobId)
        jobId = environmentNumber("BATON_JOB_ID");
    if (const char* seq = chainSeqVariable().value; !chainSeq && seq != nullptr)
        chainSeq = parseWhole(seq);
}

Options Options::fromEnvironment()
{
    Options options;
    const char* dir = std::getenv("BATON_CHAIN_DIR");
    if (dir == nullptr || *dir == '\0')
        throw ConfigError("BATON_CHAIN_DIR is not set: set it or pass Options::chainDir");
    options.chainDir = dir;
    if (!options.chainDir.is_absolute())
        throw ConfigError(std::string("BATON_CHAIN_DIR='") + dir + "' is not an absolute path");
    if (const char* keep = std::getenv("BATON_KEEP"); keep != nullptr)
        options.keep = parseKeep(keep);
    if (const char* job = std::getenv("BATON_JOB_ID"); job != nullptr && *job != '\0')
        options.jobId = parseWholeVariable("BATON_JOB_ID", job);
    if (const auto [name, seq] = chainSeqVariable(); seq != nullptr && *seq != '\0')
        options.chainSeq = parseWholeVariable(name, seq);
    if (const char* wait = std::getenv("BATON_HANDOVER_WAIT"); wait != nullptr)
        options.handoverWaitSeconds = parseHandoverWait(wait);
    if (const char* local = std::getenv("BATON_LOCAL_DIR"); local != nullptr && *local != '\0') {
        options.localDir = local;
        if (!options.localDir.is_absolute())
            throw ConfigError(std::string("BATON_LOCAL_DIR='") + local + "' is not an absolute path");
    }
    if (const char* keep = std::getenv("BATON_LOCAL_KEEP"); keep != nullptr)
        options.localKeep = parseKeep(keep, "BATON_LOCAL_KEEP");
    if (const char* rate = std::getenv("BATON_DRAIN_MBPS"); rate != nullptr)
        options.drainBytesPerSecond = parseDrainRate(rate);
    options.coordinator = FileCoordinator::fromEnvironment(options.chainDir);
    options.validate();
    return options;
}

void Options::validate() const
{
    if (chainDir.empty())
        throw ConfigError("no chain directory given");
    if (keep < 1)
        throw ConfigError("keep must be >= 1 (got " + std::to_string(keep) + ")");
    if (!(handoverWaitSeconds >= 0 && handoverWaitSeconds <= kMaxHandoverWait))
        throw ConfigError(
            "handover wait must be 0..3600 seconds (got " + std::to_string(handoverWaitSeconds) + ")");
    if ((fileMode & ~0777u) != 0 || (fileMode & 0600u) != 0600u) {
        char text[16];
        std::snprintf(text, sizeof text, "%o", fileMode);
        throw ConfigError(
            std::string("fileMode must be permission bits (at most 0777) that let the owner read "
                        "and write (got 0")
            + text + ")");
    }
    if (localKeep < 1)
        throw ConfigError("localKeep must be >= 1 (got " + std::to_string(localKeep) + ")");
    if (!(drainBytesPerSecond >= 0))
        throw ConfigError("drainBytesPerSecond must be >= 0");
    if (!localDir.empty()) {
        if (!localDir.is_absolute())
            throw ConfigError("the node-local directory " + localDir.string() + " is not an absolute path");
        if (localDir.lexically_normal() == chainDir.lexically_normal())
            throw ConfigError("the node-local directory is the chain directory itself");
    }
    if (copyThreads > 256)
        throw ConfigError("copyThreads must be <= 256 (got " + std::to_string(copyThreads) + ")");
}

} // namespace baton::ckpt
