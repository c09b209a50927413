#include "baton/ckpt/options.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "baton/ckpt/error.hpp"

namespace baton::ckpt {

namespace {

// Strict: the whole string must be a decimal number in range.
int parseKeep(const char* text)
{
    std::string value(text);
    char* end = nullptr;
    errno = 0;
    long keep = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE || keep < 1 || keep > 1000000)
        throw ConfigError("BATON_KEEP='" + value + "' is not a whole number of checkpoints >= 1");
    return static_cast<int>(keep);
}

} // namespace

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
    options.validate();
    return options;
}

void Options::validate() const
{
    if (chainDir.empty())
        throw ConfigError("no chain directory given");
    if (keep < 1)
        throw ConfigError("keep must be >= 1 (got " + std::to_string(keep) + ")");
    if (copyThreads > 256)
        throw ConfigError("copyThreads must be <= 256 (got " + std::to_string(copyThreads) + ")");
}

} // namespace baton::ckpt
