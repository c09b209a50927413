#include "config.hpp"

#include "http_client.hpp"
#include "paths.hpp"
#include "values.hpp"

#include "common/users.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <unistd.h>

namespace baton::spank {

namespace {

std::vector<std::string> splitColons(std::string_view text)
{
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= text.size()) {
        const std::size_t end = std::min(text.find(':', start), text.size());
        if (end > start) {
            parts.emplace_back(text.substr(start, end - start));
        }
        start = end + 1;
    }
    return parts;
}

void requirePattern(std::string_view key, std::string_view pattern, bool withNode = false)
{
    if (pattern.empty() || (pattern.front() != '/' && pattern.substr(0, 2) != "%h")) {
        throw std::invalid_argument(std::string(key) + " must be an absolute path (or start with %h), got '"
            + std::string(pattern) + "'");
    }
    const std::string node = "node1";
    // Rejects unknown % sequences.
    expandUserPattern(pattern, UserInfo { "user", 1, 1, "/home/user" }, withNode ? &node : nullptr);
}

void applyKey(PluginConfig& config, std::string_view key, std::string_view value)
{
    if (key == "chain_root") {
        requirePattern(key, value);
        config.chainRoot = value;
    } else if (key == "url") {
        if (!value.empty()) {
            parseHttpUrl(value);
        }
        config.url = value;
    } else if (key == "overhead") {
        config.overheadPercent = parseOverheadPercent(value);
    } else if (key == "margin") {
        config.marginSeconds = parseMarginSeconds(value);
    } else if (key == "keep") {
        config.keep = parseKeepCount(value);
    } else if (key == "handover_wait") {
        config.handoverWaitSeconds = parseHandoverWaitSeconds(value);
    } else if (key == "report_timeout") {
        config.reportTimeout = parseTimeoutSeconds(value);
    } else if (key == "local_root") {
        if (!value.empty()) {
            requirePattern(key, value, true);
        }
        config.localRoot = value;
    } else if (key == "local_keep") {
        config.localKeep = parseKeepCount(value);
    } else if (key == "drain_rate") {
        config.drainRateMBps = parseDrainRate(value);
    } else if (key == "allowed_prefixes") {
        config.allowedPrefixes = splitColons(value);
        for (const auto& prefix : config.allowedPrefixes) {
            requirePattern(key, prefix);
        }
    } else {
        throw std::invalid_argument("unknown key '" + std::string(key)
            + "' (known: chain_root, url, overhead, margin, keep, handover_wait, report_timeout, "
              "allowed_prefixes, local_root, local_keep, drain_rate)");
    }
}

} // namespace

PluginConfig parseConfig(const std::vector<std::string>& args)
{
    PluginConfig config;
    std::set<std::string, std::less<>> seen;
    for (const auto& arg : args) {
        const auto equals = arg.find('=');
        if (equals == std::string::npos || equals == 0) {
            throw std::invalid_argument("plugstack.conf: argument '" + arg + "' is not key=value");
        }
        const std::string key = arg.substr(0, equals);
        if (!seen.insert(key).second) {
            throw std::invalid_argument("plugstack.conf: key '" + key + "' given twice");
        }
        try {
            applyKey(config, key, std::string_view(arg).substr(equals + 1));
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument("plugstack.conf: " + std::string(e.what()));
        }
    }
    return config;
}

UserInfo lookupUser(uid_t uid)
{
    const os::UserEntry user = os::userOf(uid);
    return UserInfo { user.name, user.uid, user.gid, user.home };
}

std::string administratorPart(std::string_view pattern)
{
    const std::size_t percent = pattern.find('%');
    if (percent == std::string_view::npos) {
        return normalizeAbsolutePath(pattern);
    }
    const std::size_t slash = pattern.rfind('/', percent);
    return normalizeAbsolutePath(slash == std::string_view::npos ? "/" : pattern.substr(0, std::max<std::size_t>(slash, 1)));
}

std::string expandUserPattern(std::string_view pattern, const UserInfo& user, const std::string* node)
{
    std::string out;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] != '%') {
            out += pattern[i];
            continue;
        }
        const char code = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
        ++i;
        switch (code) {
        case 'u':
            out += user.name;
            break;
        case 'U':
            out += std::to_string(user.uid);
            break;
        case 'h':
            out += user.home;
            break;
        case '%':
            out += '%';
            break;
        case 'n':
            if (node != nullptr) {
                out += *node;
                break;
            }
            [[fallthrough]];
        default:
            throw std::invalid_argument("unknown placeholder in '" + std::string(pattern) + "' (known: %u, %U, %h, "
                + (node != nullptr ? "%n, " : "") + "%%)");
        }
    }
    return out;
}

} // namespace baton::spank
