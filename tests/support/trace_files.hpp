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

// The directory of the shared job traces: $BATON_TRACE_DIR, else <source root>/../shared/traces.
inline std::filesystem::path traceDirectory()
{
    if (const char* env = std::getenv("BATON_TRACE_DIR"); env && *env)
        return env;
    return sourceRoot().parent_path() / "shared" / "traces";
}

// One trace of that directory by its file name; nullopt when it is not there (each trace can be
// fetched on its own).
inline std::optional<std::filesystem::path> traceFile(const char* name)
{
    const std::filesystem::path file = traceDirectory() / name;
    if (!std::filesystem::is_regular_file(file))
        return std::nullopt;
    return file;
}

} // namespace baton::test
