// The user and group databases (passwd, group: files, LDAP, SSSD through NSS), read the one way every
// part of baton needs: reentrant calls, a buffer that grows on ERANGE up to a bound, and "no such user"
// told apart from "the database could not be read".
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace baton::os {

struct UserEntry {
    uid_t uid = 0;
    gid_t gid = 0; // the primary group
    std::string name;
    std::string home; // empty when the entry has none
    std::string shell; // empty when the entry has none
};

// nullopt when no user has this uid or name; throws std::system_error when the database cannot be read.
std::optional<UserEntry> findUser(uid_t uid);
std::optional<UserEntry> findUser(const std::string& name);
// As findUser, but an unknown uid is an error: throws std::runtime_error naming the uid.
UserEntry userOf(uid_t uid);

// The gid of the group named `name`; nullopt when there is none, std::system_error as above.
std::optional<gid_t> findGroup(const std::string& name);

// The supplementary groups of the user `name` in the group database, `gid` (the primary group)
// included.
std::vector<gid_t> groupsOf(const std::string& name, gid_t gid);

} // namespace baton::os
