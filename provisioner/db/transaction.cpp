#include "transaction.hpp"

#include "errors.hpp"

namespace baton::db {

Transaction::Transaction(Connection& connection)
    : connection_(connection)
{
    connection_.beginTransaction();
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
