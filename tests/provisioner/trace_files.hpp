// Where the tests find their input files.
#pragma once

#include "process.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>

namespace baton::test {

inline std::filesystem::path dataFile(const char* name)
{
    return sourceRoot() / "tests" / "data" / name;
}

// The shared job traces: $BATON_TRACE_DIR, else <source root>/../shared/traces; nullopt when absent.
inline std::optional<std::filesystem::path> traceDir()
{
    std::filesystem::path dir;
    if (const char* env = std::getenv("BATON_TRACE_DIR"); env && *env)
        dir = env;
    else
        dir = sourceRoot().parent_path() / "shared" / "traces";
    if (!std::filesystem::is_regular_file(dir / "ls6-a100.log"))
        return std::nullopt;
    return dir;
}

// One trace of the traces directory ($BATON_TRACE_DIR, else <source root>/../shared/traces) by its
// file name; nullopt when it is not there (each trace can be fetched on its own).
inline std::optional<std::filesystem::path> traceFile(const char* name)
{
    std::filesystem::path dir;
    if (const char* env = std::getenv("BATON_TRACE_DIR"); env && *env)
        dir = env;
    else
        dir = sourceRoot().parent_path() / "shared" / "traces";
    if (!std::filesystem::is_regular_file(dir / name))
        return std::nullopt;
    return dir / name;
}

} // namespace baton::test
