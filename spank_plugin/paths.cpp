#include "paths.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>

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

std::runtime_error systemError(const std::string& what, const std::string& path, int error)
{
    return std::runtime_error(what + " '" + path + "': " + std::strerror(error));
}

// Opens the next component as a directory; `follow` only for administrator-controlled components.
UniqueFd openComponent(int parent, const std::string& name, bool follow)
{
    const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW);
    return UniqueFd(::openat(parent, name.c_str(), flags));
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
    if (!isWithin(path, prefix)) {
        throw std::runtime_error("directory '" + path + "' is outside '" + prefix + "'");
    }
    const auto prefixParts = components(prefix);
    const auto parts = components(path);
    ChainDir result;
    UniqueFd current(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!current.valid()) {
        throw systemError("cannot open", "/", errno);
    }
    // Only root and the job user may control any directory on the way (its entries decide where the
    // next component leads) or a symbolic link in the prefix: a directory of another user's in a
    // world-writable prefix (say /scratch/<job user>, made by someone else first) would let that user
    // move the job's checkpoints. The administrator's prefix components are root's.
    const auto trusted = [owner](uid_t uid) { return uid == 0 || uid == owner; };
    std::string walked;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        walked += "/" + parts[i];
        const bool follow = i < prefixParts.size();
        struct stat link { };
        if (follow && ::fstatat(current.get(), parts[i].c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0
            && S_ISLNK(link.st_mode) && !trusted(link.st_uid)) {
            throw std::runtime_error("refusing '" + path + "': '" + walked + "' is a symbolic link of uid "
                + std::to_string(link.st_uid) + ", neither root nor the job user");
        }
        UniqueFd next = openComponent(current.get(), parts[i], follow);
        if (!next.valid() && errno == ENOENT) {
            if (::mkdirat(current.get(), parts[i].c_str(), 0700) == 0) {
                result.created = (i + 1 == parts.size());
            } else if (errno != EEXIST) {
                throw systemError("cannot create", walked, errno);
            }
            next = openComponent(current.get(), parts[i], false);
        }
        if (!next.valid()) {
            if (errno == ELOOP || errno == ENOTDIR) {
                throw std::runtime_error(
                    "refusing '" + path + "': '" + walked + "' is a symbolic link or not a directory");
            }
            throw systemError("cannot open", walked, errno);
        }
        struct stat directory { };
        if (::fstat(next.get(), &directory) != 0) {
            throw systemError("cannot stat", walked, errno);
        }
        if (!trusted(directory.st_uid)) {
            throw std::runtime_error("refusing '" + path + "': '" + walked + "' belongs to uid "
                + std::to_string(directory.st_uid) + ", neither root nor the job user");
        }
        current = std::move(next);
    }
    struct stat info { };
    if (::fstat(current.get(), &info) != 0) {
        throw systemError("cannot stat", path, errno);
    }
    if (info.st_uid != owner) {
        throw std::runtime_error("refusing '" + path + "': owned by uid " + std::to_string(info.st_uid)
            + ", not by the job user (uid " + std::to_string(owner) + ")");
    }
    result.fd = std::move(current);
    result.path = path;
    return result;
}

} // namespace baton::spank
