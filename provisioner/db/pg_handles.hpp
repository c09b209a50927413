// Owning handles for libpq objects.
#pragma once

#include <libpq-fe.h>

#include <memory>

namespace baton::db {

struct PgConnDeleter {
    void operator()(PGconn* conn) const { PQfinish(conn); }
};
struct PgResultDeleter {
    void operator()(PGresult* result) const { PQclear(result); }
};
struct PgCancelDeleter {
    void operator()(PGcancel* cancel) const { PQfreeCancel(cancel); }
};

using PgConnPtr = std::unique_ptr<PGconn, PgConnDeleter>;
using PgResultPtr = std::unique_ptr<PGresult, PgResultDeleter>;
using PgCancelPtr = std::unique_ptr<PGcancel, PgCancelDeleter>;

} // namespace baton::db
