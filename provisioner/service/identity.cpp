#include "identity.hpp"

#include "common/users.hpp"

#include <algorithm>
#include <stdexcept>
#include <system_error>

namespace baton::service {

IdentityResolver::IdentityResolver(
    const std::string& operatorsGroup, const std::vector<std::string>& slurmUsers)
{
    if (!operatorsGroup.empty()) {
        operatorsGid_ = os::findGroup(operatorsGroup);
        if (!operatorsGid_)
            throw std::runtime_error("operators_group: no group named '" + operatorsGroup + "'");
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
    if (const auto user = os::findUser(nameOrUid))
        return user->uid;
    return std::nullopt;
}

std::string IdentityResolver::nameOf(std::int64_t uid)
{
    // A name for logs and the API: a database that cannot be read leaves the number.
    try {
        if (const auto user = os::findUser(static_cast<uid_t>(uid)))
            return user->name;
    } catch (const std::system_error&) {
        return std::to_string(uid);
    }
    return std::to_string(uid);
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
        // Membership as the group database has it, primary group included; a database that cannot be
        // read grants nothing.
        try {
            if (const auto user = os::findUser(identity.uid)) {
                const auto groups = os::groupsOf(user->name, user->gid);
                caller.isOperator = std::find(groups.begin(), groups.end(), *operatorsGid_) != groups.end();
            }
        } catch (const std::runtime_error&) {
            caller.isOperator = false;
        }
    }
    return caller;
}

} // namespace baton::service
