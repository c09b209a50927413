// Settings of a Checkpointer. Each has an environment equivalent (docs/contracts.md) where one exists.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string_view>

namespace baton::ckpt {

struct Options {
    // Directory of the chain; checkpoints live directly inside it (BATON_CHAIN_DIR). Created if missing.
    std::filesystem::path chainDir;
    // Committed checkpoints to retain (BATON_KEEP); older ones go only after a newer one has committed.
    int keep = 2;
    // Staging pool allocated up front; it grows (between checkpoints) when the registered state is larger.
    std::size_t stagingBytes = 0;
    // Threads copying host regions into the staging pool and back on restore; 0 = min(4, cores).
    unsigned copyThreads = 0;
    // Write and read data with O_DIRECT where the file system supports it.
    bool directIo = true;
    // Receives warnings and errors (one line each); default: standard error.
    std::function<void(std::string_view)> log;

    // Reads BATON_CHAIN_DIR (required, absolute) and BATON_KEEP (integer >= 1). Throws ConfigError.
    static Options fromEnvironment();

    // Throws ConfigError naming the first unusable value.
    void validate() const;
};

} // namespace baton::ckpt
