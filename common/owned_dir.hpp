// A directory of one user's on a disk other users share (a node's scratch disk, the cluster file system),
// reached so that no one but root and that user decides where its path leads: opened component by
// component from '/', and kept open, so that what follows goes through the descriptor, not the name.
// The plugin opens chain and node-local directories this way, the checkpointer its node-local level.
#pragma once

#include "common/unique_fd.hpp"

#include <string>
#include <sys/types.h>

namespace baton::os {

struct OwnedDir {
    UniqueFd fd; // the directory, opened O_DIRECTORY
    std::string path; // the path it was opened by
    bool created = false; // this walk made its last component
};

// Opens `path` (absolute, normalized, no '..') lying at or below `prefix`, the administrator's part of it.
// The rule, for every step of the walk:
// - each directory on the way, '/' included, belongs to root or `owner`, and no one else can write it
//   unless it is sticky (as /tmp is: others may add entries there, but not move or remove this user's);
// - a symbolic link is followed only up to the prefix and only when root or `owner` made it; its target
//   is walked by the same rule, at most 40 links in all;
// - below the prefix nothing is followed; a missing component is created 0700 when `create` is set;
// - the directory reached belongs to `owner`.
// Throws std::runtime_error naming the component that breaks the rule, or the failed call. Call it with
// the credentials of `owner`, so that what it creates is theirs.
OwnedDir openOwnedDir(const std::string& path, const std::string& prefix, uid_t owner, bool create);

} // namespace baton::os
