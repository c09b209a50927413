#include "run_as.hpp"

#include "users.hpp"

#include <cerrno>
#include <iterator>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace baton::os {

Credentials credentialsOf(uid_t uid)
{
    const UserEntry user = userOf(uid);
    return Credentials { user.uid, user.gid, groupsOf(user.name, user.gid) };
}

bool clearCapabilities() noexcept
{
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        return false;
    __user_cap_header_struct header { _LINUX_CAPABILITY_VERSION_3, 0 };
    __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] {};
    return syscall(SYS_capset, &header, none) == 0;
}

const char* dropStepText(DropStep step) noexcept
{
    // In the order of DropStep.
    constexpr const char* texts[] = { "setgroups failed for", "setgid failed for", "setuid failed for",
        "credentials did not take effect for" };
    const auto index = static_cast<std::size_t>(step);
    return index < std::size(texts) ? texts[index] : "cannot change credentials for";
}

std::optional<DropStep> becomeOwner(const Credentials& owner) noexcept
{
    if (setgroups(owner.groups.size(), owner.groups.data()) != 0)
        return DropStep::setgroups;
    if (setgid(owner.gid) != 0)
        return DropStep::setgid;
    if (setuid(owner.uid) != 0)
        return DropStep::setuid;
    // From root, setuid cleared every capability. A non-root service user that holds CAP_SETUID,
    // CAP_SETGID and CAP_KILL (systemd's AmbientCapabilities) keeps them across setuid, and ambient ones
    // even across exec: clear them all, or the child could become root again.
    if (!clearCapabilities())
        return DropStep::verify;
    // setuid may succeed partially (saved ids) on odd systems: check what we really are now, and that
    // root could not be regained.
    if (getuid() != owner.uid || geteuid() != owner.uid || getgid() != owner.gid || getegid() != owner.gid
        || (owner.uid != 0 && setuid(0) == 0)) {
        errno = EPERM;
        return DropStep::verify;
    }
    return std::nullopt;
}

} // namespace baton::os
