// Chain directory paths: lexical checks (absolute, no '..', inside an allowed prefix) and a walk that
// opens or creates each component below the prefix without following symbolic links. The walk runs with
// the caller's credentials, so call it after switching to the job user (see credentials.hpp).
#pragma once

#include "common/owned_dir.hpp"

#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace baton::spank {

// Returns the path with '.' components and repeated or trailing slashes removed. Throws
// std::invalid_argument if it is not absolute, contains a '..' component, or control characters.
std::string normalizeAbsolutePath(std::string_view path);

// True if `path` is `prefix` or lies below it (both normalized; compares whole components).
bool isWithin(std::string_view path, std::string_view prefix);

// Returns the longest prefix (normalized) that contains `path`; throws std::invalid_argument naming
// the allowed prefixes if none does.
std::string findAllowedPrefix(std::string_view path, const std::vector<std::string>& prefixes);

using ChainDir = os::OwnedDir;

// Opens `path` (normalized, inside `prefix`), creating what is missing below the prefix mode 0700, by
// the trust rule of common/owned_dir.hpp: components up to and including the prefix are the
// administrator's and may be symbolic links of root's or the job user's; nothing below it is followed;
// every directory on the way is root's or the job user's and writable by no one else unless sticky;
// the final directory is the job user's. Throws std::runtime_error on refusal or failure.
ChainDir openChainDir(const std::string& path, const std::string& prefix, uid_t owner);

} // namespace baton::spank
