// Logs to stderr, one line each, with the syslog level prefix that journald reads (`<3>` error ...
// `<7>` debug), so that batond needs no logging daemon of its own under systemd.
#pragma once

#include "config.hpp"

#include <string_view>

namespace baton::service {

void setLogLevel(LogLevel level);
void logAt(LogLevel level, std::string_view message);
inline void logError(std::string_view message)
{
    logAt(LogLevel::Error, message);
}
inline void logWarning(std::string_view message)
{
    logAt(LogLevel::Warning, message);
}
inline void logInfo(std::string_view message)
{
    logAt(LogLevel::Info, message);
}
inline void logDebug(std::string_view message)
{
    logAt(LogLevel::Debug, message);
}

} // namespace baton::service
