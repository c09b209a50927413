// An explicit transaction that rolls back unless commit() was called.
#pragma once

#include "connection.hpp"

namespace baton::db {

// When the transaction's COMMIT returns. SessionDefault follows the session's synchronous_commit;
// Durable waits until the commit is on disk (a row that fences an action: it must survive a crash);
// Relaxed returns before that (rows that can be rebuilt, at the cost of a lost tail after a crash).
enum class Durability { SessionDefault, Durable, Relaxed };

class Transaction {
public:
    explicit Transaction(Connection& connection, Durability durability = Durability::SessionDefault);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    void commit();

private:
    Connection& connection_;
    bool done_ = false;
};

} // namespace baton::db
