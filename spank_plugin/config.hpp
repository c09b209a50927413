// The plugin's plugstack.conf arguments: `key=value` words after the plugin's path. Defaults are set
// first; an unknown key, a repeated key or a bad value is an error with a message naming the key.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace baton::spank {

struct PluginConfig {
    // Where chains live when --baton-dir is not given: <chain_root>/<chain>. May use %u, %U, %h.
    std::string chainRoot = "%h/.baton/chains";
    // batond's base URL; empty means events go to the spool file only.
    std::string url;
    double overheadPercent = 5;
    int marginSeconds = 60;
    int keep = 2;
    // BATON_HANDOVER_WAIT for jobs with a seq above 0: how long the checkpointer waits for its
    // predecessor's final checkpoint; 0 disables.
    int handoverWaitSeconds = 120;
    std::chrono::milliseconds reportTimeout { 2000 };
    // --baton-dir must lie inside one of these (or inside chain_root). May use %u, %U, %h.
    std::vector<std::string> allowedPrefixes { "%h" };
    // Two-level storage: where chains keep node-local checkpoints, <local_root>/<chain> (BATON_LOCAL_DIR);
    // empty: one level. May use %u, %U, %h and %n (the node's name), e.g. /local/%u/baton.
    std::string localRoot;
    int localKeep = 1;
    int drainRateMBps = 0; // BATON_DRAIN_MBPS; 0 = unbounded
};

// Throws std::invalid_argument("plugstack.conf: ...").
PluginConfig parseConfig(const std::vector<std::string>& args);

// The user a path pattern is expanded for.
struct UserInfo {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
    std::string home;
};

// Looks the user up in the password database; throws std::runtime_error if unknown.
UserInfo lookupUser(uid_t uid);

// Replaces %u (name), %U (uid), %h (home), %% and, where `node` is given, %n (the node's name) in a path
// pattern; throws std::invalid_argument on any other % sequence.
std::string expandUserPattern(std::string_view pattern, const UserInfo& user, const std::string* node = nullptr);

// The administrator's part of a path pattern: its leading components that hold no % sequence ("/local"
// of "/local/%u/baton"; all of a pattern without one). Normalized; "/" when the first component has one.
std::string administratorPart(std::string_view pattern);

} // namespace baton::spank
