// Exceptions thrown by libbaton-ckpt. Bad input (options, files, layouts) always ends up here, never in
// an assertion.
#pragma once

#include <stdexcept>
#include <string>

namespace baton::ckpt {

// Any failure the caller can act on: I/O errors, corrupt checkpoints, bad registrations.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// An option or BATON_* environment variable has a value that cannot be used.
class ConfigError : public Error {
public:
    using Error::Error;
};

// A manifest written by a newer, unknown format version: restoring must not silently skip it.
class FormatError : public Error {
public:
    using Error::Error;
};

} // namespace baton::ckpt
