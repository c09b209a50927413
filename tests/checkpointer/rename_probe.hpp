// The probe of a test run with fault_shim.so preloaded to refuse renameat2's flags: such a test must
// not pass because the shim is missing.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace baton::test {

// A rename with RENAME_NOREPLACE in `dir` fails with EINVAL; `why` says what is missing if not.
inline void expectRenameFlagsRefused(const std::filesystem::path& dir, const char* why)
{
    auto from = dir / "probe-a", to = dir / "probe-b";
    std::ofstream(from) << "x";
    errno = 0;
    ASSERT_EQ(::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE), -1) << why;
    ASSERT_EQ(errno, EINVAL);
    std::filesystem::remove(from);
}

} // namespace baton::test
