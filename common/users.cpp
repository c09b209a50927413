#include "users.hpp"

#include <algorithm>
#include <cerrno>
#include <grp.h>
#include <pwd.h>
#include <stdexcept>
#include <system_error>
#include <unistd.h>
#include <utility>

namespace baton::os {

namespace {

// An entry larger than this is not a real one: stop doubling rather than exhaust memory.
constexpr std::size_t maxEntryBytes = std::size_t { 1 } << 20;

// Runs `call(entry, buffer, size, result)`, a getXXX_r, with a buffer that doubles on ERANGE, and
// converts what it found. Besides 0, NSS modules answer "not found" with ENOENT, ESRCH, EBADF or EPERM;
// anything else (or an entry larger than the bound) is an error.
template <typename Entry, typename Call, typename Convert>
auto lookUp(int sizeHint, const std::string& what, Call call, Convert convert)
    -> std::optional<decltype(convert(std::declval<const Entry&>()))>
{
    const long hint = sysconf(sizeHint);
    std::vector<char> buffer(hint > 0 ? static_cast<std::size_t>(hint) : 16384);
    Entry entry {};
    Entry* result = nullptr;
    int rc;
    while ((rc = call(&entry, buffer.data(), buffer.size(), &result)) == ERANGE && buffer.size() < maxEntryBytes)
        buffer.resize(buffer.size() * 2);
    if (rc == 0 && result)
        return convert(entry);
    if (rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM)
        return std::nullopt;
    throw std::system_error(rc, std::generic_category(), what);
}

UserEntry userEntryOf(const passwd& entry)
{
    return { entry.pw_uid, entry.pw_gid, entry.pw_name ? entry.pw_name : "", entry.pw_dir ? entry.pw_dir : "",
        entry.pw_shell ? entry.pw_shell : "" };
}

} // namespace

std::optional<UserEntry> findUser(uid_t uid)
{
    return lookUp<passwd>(_SC_GETPW_R_SIZE_MAX, "getpwuid_r(" + std::to_string(uid) + ")",
        [uid](passwd* entry, char* buffer, std::size_t size, passwd** result) {
            return getpwuid_r(uid, entry, buffer, size, result);
        },
        userEntryOf);
}

std::optional<UserEntry> findUser(const std::string& name)
{
    return lookUp<passwd>(_SC_GETPW_R_SIZE_MAX, "getpwnam_r(" + name + ")",
        [&name](passwd* entry, char* buffer, std::size_t size, passwd** result) {
            return getpwnam_r(name.c_str(), entry, buffer, size, result);
        },
        userEntryOf);
}

UserEntry userOf(uid_t uid)
{
    auto user = findUser(uid);
    if (!user)
        throw std::runtime_error("no user with uid " + std::to_string(uid) + " in the password database");
    return std::move(*user);
}

std::optional<gid_t> findGroup(const std::string& name)
{
    return lookUp<group>(_SC_GETGR_R_SIZE_MAX, "getgrnam_r(" + name + ")",
        [&name](group* entry, char* buffer, std::size_t size, group** result) {
            return getgrnam_r(name.c_str(), entry, buffer, size, result);
        },
        [](const group& entry) { return entry.gr_gid; });
}

std::vector<gid_t> groupsOf(const std::string& name, gid_t gid)
{
    // getgrouplist says how many there are when the array is too small; the kernel's limit bounds it.
    const long limit = sysconf(_SC_NGROUPS_MAX);
    const int most = limit > 0 ? static_cast<int>(std::min(limit, 65536L)) + 1 : 65537;
    int count = 32;
    std::vector<gid_t> groups(static_cast<std::size_t>(count));
    while (getgrouplist(name.c_str(), gid, groups.data(), &count) < 0) {
        if (count <= static_cast<int>(groups.size()))
            count = static_cast<int>(groups.size()) * 2;
        if (count > most)
            throw std::runtime_error("user " + name + " is in more groups than a process can hold");
        groups.resize(static_cast<std::size_t>(count));
    }
    groups.resize(static_cast<std::size_t>(count));
    return groups;
}

} // namespace baton::os
