/* Fault injection for the checkpointer tests, loaded with LD_PRELOAD so that the library's real calls
 * meet the errors a network file system gives:
 *
 *   BATON_TEST_REFUSE_RENAME_FLAGS=1   renameat2 with any flag fails with EINVAL, as on Linux NFS and on
 *                                      FUSE without rename2; without flags it renames.
 *   BATON_TEST_STAT_FAULT=<errno>:<suffix>
 *                                      stat, lstat and fstatat of a path ending in <suffix> fail with that
 *                                      errno (EIO, ESTALE, ...).
 *
 * The variables are read at every call, so a test may set them while it runs. */
#define _GNU_SOURCE
/* Both names of each stat function are defined here: the headers must not alias one to the other. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int renameat2(int olddirfd, const char* oldpath, int newdirfd, const char* newpath, unsigned int flags)
{
    const char* refuse = getenv("BATON_TEST_REFUSE_RENAME_FLAGS");
    if (flags != 0 && refuse != NULL && strcmp(refuse, "1") == 0) {
        errno = EINVAL;
        return -1;
    }
    return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

/* The errno to fail a stat of `path` with, or 0. */
static int statFault(const char* path)
{
    const char* spec = getenv("BATON_TEST_STAT_FAULT");
    if (spec == NULL || path == NULL)
        return 0;
    char* end = NULL;
    long code = strtol(spec, &end, 10);
    if (end == spec || *end != ':' || code <= 0)
        return 0;
    const char* suffix = end + 1;
    size_t pathLength = strlen(path), suffixLength = strlen(suffix);
    if (suffixLength == 0 || pathLength < suffixLength
        || strcmp(path + pathLength - suffixLength, suffix) != 0)
        return 0;
    return (int)code;
}

#define FORWARD(name, signature, ...)                                                                        \
    typedef int(*name##_fn) signature;                                                                       \
    int name signature                                                                                       \
    {                                                                                                        \
        int fault = statFault(path);                                                                         \
        if (fault != 0) {                                                                                    \
            errno = fault;                                                                                   \
            return -1;                                                                                       \
        }                                                                                                    \
        static name##_fn next = NULL;                                                                        \
        if (next == NULL)                                                                                    \
            next = (name##_fn)dlsym(RTLD_NEXT, #name);                                                       \
        return next(__VA_ARGS__);                                                                            \
    }

FORWARD(stat, (const char* path, struct stat* buf), path, buf)
FORWARD(stat64, (const char* path, struct stat64* buf), path, buf)
FORWARD(lstat, (const char* path, struct stat* buf), path, buf)
FORWARD(lstat64, (const char* path, struct stat64* buf), path, buf)
FORWARD(fstatat, (int dirfd, const char* path, struct stat* buf, int flags), dirfd, path, buf, flags)
FORWARD(fstatat64, (int dirfd, const char* path, struct stat64* buf, int flags), dirfd, path, buf, flags)
