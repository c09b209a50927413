// Who sent a request: decoded from its MUNGE credential, never from its body. Operators are the
// members of the configured unix group; the plugin speaks as root or a configured SlurmUser.
#pragma once

#include "common/munge_credential.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace baton::service {

struct Caller {
    std::int64_t uid = -1;
    std::string userName;
    bool isOperator = false;
    bool isSlurm = false; // root or a SlurmUser: may send plugin events
};

class IdentityResolver {
public:
    IdentityResolver(const std::string& operatorsGroup, const std::vector<std::string>& slurmUsers);
    Caller resolve(const munge::Identity& identity) const;
    // A user name or a numeric uid; nullopt when unknown.
    static std::optional<std::int64_t> uidOf(const std::string& nameOrUid);
    static std::string nameOf(std::int64_t uid);

private:
    std::optional<gid_t> operatorsGid_;
    std::vector<std::int64_t> slurmUids_;
};

} // namespace baton::service
