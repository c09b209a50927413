#include "log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace baton::service {

namespace {

std::atomic<LogLevel> threshold { LogLevel::Info };
std::mutex outputMutex;

const char* prefixOf(LogLevel level)
{
    switch (level) {
    case LogLevel::Error:
        return "<3>error: ";
    case LogLevel::Warning:
        return "<4>warning: ";
    case LogLevel::Info:
        return "<6>";
    case LogLevel::Debug:
        return "<7>debug: ";
    }
    return "";
}

} // namespace

void setLogLevel(LogLevel level)
{
    threshold = level;
}

void logAt(LogLevel level, std::string_view message)
{
    if (level > threshold.load())
        return;
    std::string line = prefixOf(level);
    line.append(message).push_back('\n');
    const std::lock_guard lock(outputMutex);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}

} // namespace baton::service
