#include "credentials.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <grp.h>
#include <stdexcept>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>

namespace baton::spank {

namespace {

constexpr long keep = -1;

long threadSetgroups(const std::vector<gid_t>& groups)
{
    return ::syscall(SYS_setgroups, groups.size(), groups.data());
}

long threadSetegid(gid_t gid)
{
    return ::syscall(SYS_setresgid, keep, gid, keep);
}

long threadSeteuid(uid_t uid)
{
    return ::syscall(SYS_setresuid, keep, uid, keep);
}

std::runtime_error credentialError(const char* what)
{
    return std::runtime_error(
        std::string("cannot switch to the job user: ") + what + ": " + std::strerror(errno));
}

} // namespace

ThreadCredentials::ThreadCredentials(uid_t uid, gid_t gid, const std::vector<gid_t>& groups)
{
    if (::geteuid() == uid && ::getegid() == gid) {
        return;
    }
    if (::geteuid() != 0) {
        throw std::runtime_error(
            "cannot switch to uid " + std::to_string(uid) + " from uid " + std::to_string(::geteuid()));
    }
    savedEgid_ = ::getegid();
    const int count = ::getgroups(0, nullptr);
    if (count < 0) {
        throw credentialError("getgroups");
    }
    savedGroups_.resize(static_cast<std::size_t>(count));
    if (::getgroups(count, savedGroups_.data()) != count) {
        throw credentialError("getgroups");
    }
    // Groups and gid first: once the euid is not 0 the thread may no longer change them.
    if (threadSetgroups(groups) != 0) {
        throw credentialError("setgroups");
    }
    switched_ = true;
    if (threadSetegid(gid) != 0) {
        const auto error = credentialError("setresgid");
        restore();
        throw error;
    }
    if (threadSeteuid(uid) != 0) {
        const auto error = credentialError("setresuid");
        restore();
        throw error;
    }
}

ThreadCredentials::~ThreadCredentials()
{
    restore();
}

void ThreadCredentials::restore() noexcept
{
    if (!switched_) {
        return;
    }
    switched_ = false;
    // The saved uid is still 0, so these cannot fail short of a kernel refusing its own contract.
    if (threadSeteuid(0) != 0 || threadSetegid(savedEgid_) != 0 || threadSetgroups(savedGroups_) != 0) {
        std::fprintf(stderr, "baton: cannot restore root credentials: %s\n", std::strerror(errno));
    }
}

ThreadRootCredentials::ThreadRootCredentials()
{
    if (::geteuid() == 0) {
        return;
    }
    uid_t real = 0;
    uid_t effective = 0;
    uid_t saved = 0;
    if (::getresuid(&real, &effective, &saved) != 0 || (real != 0 && saved != 0)) {
        throw std::runtime_error("cannot become root from uid " + std::to_string(::geteuid()));
    }
    savedEuid_ = effective;
    savedEgid_ = ::getegid();
    const int count = ::getgroups(0, nullptr);
    if (count < 0) {
        throw std::runtime_error(std::string("getgroups: ") + std::strerror(errno));
    }
    savedGroups_.resize(static_cast<std::size_t>(count));
    if (::getgroups(count, savedGroups_.data()) != count) {
        throw std::runtime_error(std::string("getgroups: ") + std::strerror(errno));
    }
    // The uid first: only as root may the thread change its gid and groups.
    if (threadSeteuid(0) != 0) {
        throw std::runtime_error(std::string("cannot become root: setresuid: ") + std::strerror(errno));
    }
    switched_ = true;
    if (threadSetegid(0) != 0 || threadSetgroups({}) != 0) {
        const std::string error = std::strerror(errno);
        restore();
        throw std::runtime_error("cannot become root: setresgid/setgroups: " + error);
    }
}

ThreadRootCredentials::~ThreadRootCredentials()
{
    restore();
}

void ThreadRootCredentials::restore() noexcept
{
    if (!switched_) {
        return;
    }
    switched_ = false;
    // Groups and gid while still root, the uid last.
    if (threadSetgroups(savedGroups_) != 0 || threadSetegid(savedEgid_) != 0
        || threadSeteuid(savedEuid_) != 0) {
        std::fprintf(stderr, "baton: cannot return to uid %u: %s\n", static_cast<unsigned>(savedEuid_),
            std::strerror(errno));
    }
}

} // namespace baton::spank
