#include "paths.hpp"

#include <stdexcept>

namespace baton::spank {

namespace {

std::vector<std::string> components(std::string_view path)
{
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start < path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string_view::npos) {
            end = path.size();
        }
        if (end > start) {
            parts.emplace_back(path.substr(start, end - start));
        }
        start = end + 1;
    }
    return parts;
}

} // namespace

std::string normalizeAbsolutePath(std::string_view path)
{
    if (path.empty() || path.front() != '/') {
        throw std::invalid_argument("path '" + std::string(path) + "' is not absolute");
    }
    for (unsigned char c : path) {
        if (c < 0x20 || c == 0x7f) {
            throw std::invalid_argument("path contains control characters");
        }
    }
    std::string normalized;
    for (const auto& part : components(path)) {
        if (part == "..") {
            throw std::invalid_argument("path '" + std::string(path) + "' contains '..' (path traversal)");
        }
        if (part != ".") {
            normalized += "/" + part;
        }
    }
    return normalized.empty() ? "/" : normalized;
}

bool isWithin(std::string_view path, std::string_view prefix)
{
    if (prefix == "/") {
        return !path.empty() && path.front() == '/';
    }
    return path.substr(0, prefix.size()) == prefix
        && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

std::string findAllowedPrefix(std::string_view path, const std::vector<std::string>& prefixes)
{
    std::string best;
    std::string list;
    for (const auto& raw : prefixes) {
        const std::string prefix = normalizeAbsolutePath(raw);
        list += (list.empty() ? "" : ", ") + prefix;
        if (isWithin(path, prefix) && prefix.size() > best.size()) {
            best = prefix;
        }
    }
    if (best.empty()) {
        throw std::invalid_argument(
            "directory '" + std::string(path) + "' is outside the allowed prefixes (" + list + ")");
    }
    return best;
}

ChainDir openChainDir(const std::string& path, const std::string& prefix, uid_t owner)
{
    return os::openOwnedDir(path, prefix, owner, true);
}

} // namespace baton::spank
