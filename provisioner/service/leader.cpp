#include "leader.hpp"

#include "log.hpp"

#include "db/errors.hpp"

namespace baton::service {

namespace {

// One constant key for "the active batond": the bytes of "baton" as a number.
constexpr db::Statement tryLock { "leader_try_lock",
    "SELECT pg_try_advisory_lock(422617853550), pg_backend_pid()" };
constexpr db::Statement backendPid { "leader_backend_pid", "SELECT pg_backend_pid()" };

db::ConnectionOptions leaderOptions()
{
    db::ConnectionOptions options;
    options.connectTimeout = std::chrono::seconds(5);
    options.callTimeout = std::chrono::milliseconds(5'000);
    options.statementTimeout = std::chrono::milliseconds(5'000);
    options.reconnectFor = std::chrono::milliseconds(0); // retried by the next check instead
    return options;
}

} // namespace

LeaderLock::LeaderLock(std::string conninfo)
    : conninfo_(std::move(conninfo))
{ }

bool LeaderLock::check()
{
    const bool was = held_;
    try {
        if (!connection_)
            connection_ = std::make_unique<db::Connection>(conninfo_, leaderOptions());
        if (held_) {
            // Not retried on a new session: a different backend means the lock went with the old one.
            held_ = connection_->exec(backendPid).int64(0, 0) == backendPid_;
        }
        if (!held_) {
            const auto result = connection_->exec(tryLock);
            held_ = result.boolean(0, 0);
            backendPid_ = static_cast<int>(result.int64(0, 1));
        }
    } catch (const db::DbError& error) {
        if (held_ || connection_)
            logWarning(std::string("leader lock: ") + error.what());
        connection_.reset();
        held_ = false;
    }
    if (held_ != was)
        logInfo(held_ ? "this instance is now the active one" : "this instance is no longer the active one");
    return held_;
}

} // namespace baton::service
