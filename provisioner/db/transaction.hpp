// An explicit transaction that rolls back unless commit() was called.
#pragma once

#include "connection.hpp"

namespace baton::db {

class Transaction {
public:
    explicit Transaction(Connection& connection);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    void commit();

private:
    Connection& connection_;
    bool done_ = false;
};

} // namespace baton::db
