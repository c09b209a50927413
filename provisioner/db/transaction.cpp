#include "transaction.hpp"

#include "errors.hpp"

namespace baton::db {

Transaction::Transaction(Connection& connection, Durability durability)
    : connection_(connection)
{
    connection_.beginTransaction();
    if (durability == Durability::Durable)
        connection_.execScript("SET LOCAL synchronous_commit TO on");
    else if (durability == Durability::Relaxed)
        connection_.execScript("SET LOCAL synchronous_commit TO off");
}

Transaction::~Transaction()
{
    if (!done_)
        connection_.rollbackTransaction();
}

void Transaction::commit()
{
    if (done_)
        throw DbError("the transaction was already committed");
    done_ = true;
    connection_.commitTransaction();
}

} // namespace baton::db
