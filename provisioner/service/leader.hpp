// Exactly one active batond per database: the active instance holds a PostgreSQL session-level advisory
// lock on its own connection. The lock goes with the session, so an instance that dies (or loses its
// database connection) releases it at once and a standby takes it at its next tick.
#pragma once

#include "db/connection.hpp"

#include <memory>
#include <string>

namespace baton::service {

class LeaderLock {
public:
    explicit LeaderLock(std::string conninfo);
    // Takes the lock if free, or confirms that this session still holds it. Never throws: a database
    // that cannot be reached means not leading.
    bool check();
    bool held() const { return held_; }

private:
    std::string conninfo_;
    std::unique_ptr<db::Connection> connection_;
    int backendPid_ = 0;
    bool held_ = false;
};

} // namespace baton::service
