// Helpers for tests that drive real programs: run a command without a shell, temporary directories.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace baton::test {

struct ProcessResult {
    int exitCode = -1;       // the program's exit status, or 128 + signal number
    bool timedOut = false;
    std::string output;      // standard output and standard error, interleaved
};

// Runs argv[0] (looked up in PATH) with argv, never through a shell. Kills it after `timeout`.
ProcessResult run(const std::vector<std::string>& argv,
                  std::chrono::milliseconds timeout = std::chrono::minutes(2));

// The project's source directory, for finding deploy/ scripts and tests/data/.
std::filesystem::path sourceRoot();

// A fresh directory, removed with everything in it when the object goes away.
class TempDir {
public:
    explicit TempDir(std::string_view prefix = "baton-test");
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

}  // namespace baton::test
