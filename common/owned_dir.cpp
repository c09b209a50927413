#include "common/owned_dir.hpp"

#include <cerrno>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <limits.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace baton::os {

namespace {

constexpr int maxLinks = 40; // as the kernel's own bound on one lookup (ELOOP)

std::vector<std::string> componentsOf(const std::string& path)
{
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start < path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos)
            end = path.size();
        if (end > start)
            parts.push_back(path.substr(start, end - start));
        start = end + 1;
    }
    return parts;
}

bool isWithin(const std::string& path, const std::string& prefix)
{
    if (prefix == "/")
        return !path.empty() && path.front() == '/';
    return path.compare(0, prefix.size(), prefix) == 0
        && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

std::runtime_error systemError(const std::string& what, const std::string& path, int error)
{
    return std::runtime_error(what + " '" + path + "': " + std::strerror(error));
}

class Walk {
public:
    Walk(const std::string& path, uid_t owner)
        : path_(path)
        , owner_(owner)
    { }

    bool trusted(uid_t uid) const { return uid == 0 || uid == owner_; }

    [[noreturn]] void refuse(const std::string& where, const std::string& why) const
    {
        throw std::runtime_error("refusing '" + path_ + "': '" + where + "' " + why);
    }

    // The rule for every directory reached: its entries decide where the rest of the path leads.
    void check(int fd, const std::string& where) const
    {
        struct stat st { };
        if (::fstat(fd, &st) != 0)
            throw systemError("cannot examine", where, errno);
        if (!trusted(st.st_uid))
            refuse(where, "belongs to uid " + std::to_string(st.st_uid) + ", neither root nor the job user");
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
            refuse(where, "is writable by other users and not sticky");
    }

private:
    const std::string& path_;
    uid_t owner_;
};

std::string joined(const std::string& walked, const std::string& name)
{
    return (walked == "/" ? "" : walked) + "/" + name;
}

} // namespace

OwnedDir openOwnedDir(const std::string& path, const std::string& prefix, uid_t owner, bool create)
{
    if (!isWithin(path, prefix))
        throw std::runtime_error("directory '" + path + "' is outside '" + prefix + "'");
    const Walk walk(path, owner);
    struct Step {
        std::string name;
        bool mayFollow; // at or above the prefix: the administrator's, where links may be
    };
    std::deque<Step> steps;
    const std::size_t prefixDepth = componentsOf(prefix).size();
    for (const auto& part : componentsOf(path))
        steps.push_back({ part, steps.size() < prefixDepth });

    OwnedDir result;
    result.path = path;
    UniqueFd current(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!current.valid())
        throw systemError("cannot open", "/", errno);
    std::string walked = "/";
    walk.check(current.get(), walked);
    int links = 0;
    while (!steps.empty()) {
        const Step step = steps.front();
        steps.pop_front();
        const std::string where = joined(walked, step.name);
        struct stat entry { };
        bool made = false;
        if (::fstatat(current.get(), step.name.c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT || !create)
                throw systemError("cannot examine", where, errno);
            if (::mkdirat(current.get(), step.name.c_str(), 0700) == 0)
                made = true;
            else if (errno != EEXIST)
                throw systemError("cannot create", where, errno);
            if (::fstatat(current.get(), step.name.c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0)
                throw systemError("cannot examine", where, errno);
        }
        if (S_ISLNK(entry.st_mode)) {
            if (!step.mayFollow)
                walk.refuse(where, "is a symbolic link below the administrator's '" + prefix + "'");
            if (!walk.trusted(entry.st_uid))
                walk.refuse(where,
                    "is a symbolic link of uid " + std::to_string(entry.st_uid) + ", neither root nor the job user");
            if (++links > maxLinks)
                walk.refuse(where, "leads through more than " + std::to_string(maxLinks) + " symbolic links");
            char target[PATH_MAX];
            const ssize_t n = ::readlinkat(current.get(), step.name.c_str(), target, sizeof target);
            if (n <= 0 || n == static_cast<ssize_t>(sizeof target))
                throw systemError("cannot read the symbolic link", where, n < 0 ? errno : ENAMETOOLONG);
            const std::string text(target, static_cast<std::size_t>(n));
            const auto parts = componentsOf(text);
            for (auto part = parts.rbegin(); part != parts.rend(); ++part)
                steps.push_front({ *part, true }); // the administrator's link: its target is theirs too
            if (text.front() == '/') {
                current = UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
                if (!current.valid())
                    throw systemError("cannot open", "/", errno);
                walked = "/";
            }
            continue;
        }
        UniqueFd next(::openat(current.get(), step.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next.valid()) {
            if (errno == ELOOP || errno == ENOTDIR)
                walk.refuse(where, "is a symbolic link or not a directory");
            throw systemError("cannot open", where, errno);
        }
        walk.check(next.get(), where);
        current = std::move(next);
        walked = where;
        result.created = made && steps.empty();
    }
    struct stat reached { };
    if (::fstat(current.get(), &reached) != 0)
        throw systemError("cannot examine", path, errno);
    if (reached.st_uid != owner)
        throw std::runtime_error("refusing '" + path + "': owned by uid " + std::to_string(reached.st_uid)
            + ", not by the job user (uid " + std::to_string(owner) + ")");
    result.fd = std::move(current);
    return result;
}

} // namespace baton::os
