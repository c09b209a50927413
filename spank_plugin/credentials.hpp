// Runs a block of code with the job user's identity. Only the calling thread changes identity (raw
// setresuid/setresgid/setgroups system calls; glibc's wrappers would change every thread of
// slurmstepd), and the saved uid stays 0 so that the destructor can switch back.
#pragma once

#include <sys/types.h>
#include <vector>

namespace baton::spank {

class ThreadCredentials {
public:
    // If the thread already runs as uid/gid, nothing changes. If it runs as root, it switches its
    // effective ids and supplementary groups. Otherwise throws std::runtime_error.
    ThreadCredentials(uid_t uid, gid_t gid, const std::vector<gid_t>& groups);
    ~ThreadCredentials();
    ThreadCredentials(const ThreadCredentials&) = delete;
    ThreadCredentials& operator=(const ThreadCredentials&) = delete;

    bool switched() const { return switched_; }

private:
    void restore() noexcept;

    bool switched_ = false;
    gid_t savedEgid_ = 0;
    std::vector<gid_t> savedGroups_;
};

// Runs a block of code as root on the calling thread only, from a thread whose effective ids are the
// job user's but whose real or saved uid is 0: slurmstepd calls slurm_spank_user_init after its own
// seteuid() to the job user (real and saved uid stay 0), and the task callbacks as root. A MUNGE
// credential states the effective uid of the thread that asks munged, so an event is signed inside
// this. If the thread is root already, nothing changes; if it cannot become root, throws
// std::runtime_error. The destructor restores the groups, gid and uid it found.
class ThreadRootCredentials {
public:
    ThreadRootCredentials();
    ~ThreadRootCredentials();
    ThreadRootCredentials(const ThreadRootCredentials&) = delete;
    ThreadRootCredentials& operator=(const ThreadRootCredentials&) = delete;

    bool switched() const { return switched_; }

private:
    void restore() noexcept;

    bool switched_ = false;
    uid_t savedEuid_ = 0;
    gid_t savedEgid_ = 0;
    std::vector<gid_t> savedGroups_;
};

} // namespace baton::spank
