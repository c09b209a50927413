#include "identity.hpp"

#include <algorithm>
#include <grp.h>
#include <pwd.h>
#include <stdexcept>

namespace baton::service {

IdentityResolver::IdentityResolver(
    const std::string& operatorsGroup, const std::vector<std::string>& slurmUsers)
{
    if (!operatorsGroup.empty()) {
        group entry {};
        group* found = nullptr;
        char buffer[16384];
        if (getgrnam_r(operatorsGroup.c_str(), &entry, buffer, sizeof buffer, &found) != 0 || !found)
            throw std::runtime_error("operators_group: no group named '" + operatorsGroup + "'");
        operatorsGid_ = found->gr_gid;
    }
    for (const auto& user : slurmUsers) {
        const auto uid = uidOf(user);
        if (!uid)
            throw std::runtime_error("slurm_users: no user named '" + user + "'");
        slurmUids_.push_back(*uid);
    }
}

std::optional<std::int64_t> IdentityResolver::uidOf(const std::string& nameOrUid)
{
    if (!nameOrUid.empty()
        && std::all_of(nameOrUid.begin(), nameOrUid.end(), [](char c) { return c >= '0' && c <= '9'; })
        && nameOrUid.size() < 11)
        return std::stoll(nameOrUid);
    passwd entry {};
    passwd* found = nullptr;
    char buffer[16384];
    if (getpwnam_r(nameOrUid.c_str(), &entry, buffer, sizeof buffer, &found) != 0 || !found)
        return std::nullopt;
    return found->pw_uid;
}

std::string IdentityResolver::nameOf(std::int64_t uid)
{
    passwd entry {};
    passwd* found = nullptr;
    char buffer[16384];
    if (getpwuid_r(static_cast<uid_t>(uid), &entry, buffer, sizeof buffer, &found) != 0 || !found)
        return std::to_string(uid);
    return found->pw_name;
}

Caller IdentityResolver::resolve(const munge::Identity& identity) const
{
    Caller caller;
    caller.uid = identity.uid;
    caller.userName = nameOf(identity.uid);
    caller.isSlurm = identity.uid == 0
        || std::find(slurmUids_.begin(), slurmUids_.end(), static_cast<std::int64_t>(identity.uid))
            != slurmUids_.end();
    // root can cancel any job with scancel anyway: it is an operator here too.
    caller.isOperator = identity.uid == 0;
    if (operatorsGid_ && !caller.isOperator) {
        // Membership as the group database has it, primary group included.
        passwd entry {};
        passwd* found = nullptr;
        char buffer[16384];
        if (getpwuid_r(identity.uid, &entry, buffer, sizeof buffer, &found) == 0 && found) {
            int count = 64;
            std::vector<gid_t> groups(static_cast<std::size_t>(count));
            if (getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count) < 0) {
                groups.resize(static_cast<std::size_t>(count));
                getgrouplist(found->pw_name, found->pw_gid, groups.data(), &count);
            }
            groups.resize(static_cast<std::size_t>(std::max(count, 0)));
            caller.isOperator = std::find(groups.begin(), groups.end(), *operatorsGid_) != groups.end();
        }
    }
    return caller;
}

} // namespace baton::service
