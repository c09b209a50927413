#include "transaction.hpp"

#include "errors.hpp"

namespace baton::db {

Transaction::Transaction(Connection& connection)
    : connection_(connection)
{
    if (connection_.inTransaction())
        throw DbError("a transaction is already open on this connection");
    connection_.execScript("BEGIN");
}

Transaction::~Transaction()
{
    if (done_)
        return;
    try {
        if (connection_.inTransaction())
            connection_.execScript("ROLLBACK");
    } catch (const DbError&) {
        // A lost session has rolled back on the server already.
    }
}

void Transaction::commit()
{
    if (done_)
        throw DbError("the transaction was already committed");
    done_ = true;
    connection_.execScript("COMMIT");
}

} // namespace baton::db
