// The operating-system code in common/: user and group lookups, taking an owner's identity in a forked
// child, strict UTF-8.
#include "common/run_as.hpp"
#include "common/users.hpp"
#include "common/utf8.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using namespace baton;

// No user or group on a test machine has these.
constexpr uid_t unknownUid = 4'000'000'123;
const std::string unknownName = "baton-no-such-user-42";

TEST(Users, FindsRootByUidAndName)
{
    const auto byUid = os::findUser(0);
    ASSERT_TRUE(byUid);
    EXPECT_EQ(byUid->name, "root");
    EXPECT_EQ(byUid->gid, 0u);
    const auto byName = os::findUser(std::string("root"));
    ASSERT_TRUE(byName);
    EXPECT_EQ(byName->uid, 0u);
    EXPECT_EQ(os::userOf(0).name, "root");
}

TEST(Users, AnUnknownUserIsNothingOrAClearError)
{
    EXPECT_FALSE(os::findUser(unknownUid));
    EXPECT_FALSE(os::findUser(unknownName));
    EXPECT_FALSE(os::findGroup(unknownName));
    try {
        os::userOf(unknownUid);
        FAIL() << "userOf of an unknown uid returned";
    } catch (const std::runtime_error& error) {
        EXPECT_STREQ(error.what(), "no user with uid 4000000123 in the password database");
    }
}

TEST(Users, GroupsIncludeThePrimaryGroup)
{
    EXPECT_EQ(os::findGroup("root"), gid_t { 0 });
    const auto groups = os::groupsOf("root", 0);
    EXPECT_NE(std::find(groups.begin(), groups.end(), gid_t { 0 }), groups.end());
    const auto credentials = os::credentialsOf(0);
    EXPECT_EQ(credentials.uid, 0u);
    EXPECT_EQ(credentials.groups, groups);
    EXPECT_THROW(os::credentialsOf(unknownUid), std::runtime_error);
}

// The child's exit status: 0 when becomeOwner succeeded and the ids are the owner's, else 10 + the step.
int becomeOwnerInChild(const os::Credentials& owner)
{
    const pid_t child = fork();
    if (child == 0) {
        if (const auto failed = os::becomeOwner(owner))
            _exit(10 + static_cast<int>(*failed));
        _exit(getuid() == owner.uid && getegid() == owner.gid && setuid(0) != 0 ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RunAs, AChildTakesTheOwnersIdentityOrSaysWhichStepFailed)
{
    const os::Credentials nobody { 65534, 65534, { 65534 } };
    if (geteuid() == 0)
        EXPECT_EQ(becomeOwnerInChild(nobody), 0);
    else // without CAP_SETGID the first step fails
        EXPECT_EQ(becomeOwnerInChild(nobody), 10 + static_cast<int>(os::DropStep::setgroups));
    EXPECT_STREQ(os::dropStepText(os::DropStep::setuid), "setuid failed for");
}

TEST(Utf8, StrictForms)
{
    static_assert(text::validUtf8("plain"));
    EXPECT_TRUE(text::validUtf8("gr\xc3\xbc\xc3\x9f \xf0\x9f\x98\x80"));
    EXPECT_TRUE(text::validUtf8(std::string_view("nul\0inside", 10)));
    EXPECT_FALSE(text::validUtf8("\xff\xfe"));
    EXPECT_FALSE(text::validUtf8("cut \xc3"));
    EXPECT_FALSE(text::validUtf8("\xc0\xaf")); // overlong
    EXPECT_FALSE(text::validUtf8("\xed\xa0\x80")); // a surrogate
    EXPECT_FALSE(text::validUtf8("\xf4\x90\x80\x80")); // above U+10FFFF
}

} // namespace
