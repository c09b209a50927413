#include "migrations.hpp"

#include "errors.hpp"
#include "transaction.hpp"

#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

namespace baton::db {

namespace {

// "baton" in ASCII: the advisory lock key shared by every migrator.
constexpr std::int64_t migrationLockKey = 0x626174'6f6e;

constexpr Statement createMigrationsTable { "create_schema_migrations",
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version integer PRIMARY KEY CHECK (version > 0),"
    " name text NOT NULL,"
    " checksum text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())",
    true };
constexpr Statement migrationsTableExists { "schema_migrations_exists",
    "SELECT to_regclass('schema_migrations') IS NOT NULL", true };
constexpr Statement selectApplied { "select_applied_migrations",
    "SELECT version, name, checksum, to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')"
    " FROM schema_migrations ORDER BY version",
    true };
constexpr Statement insertApplied { "insert_applied_migration",
    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)" };
constexpr Statement tryLock { "try_migration_lock", "SELECT pg_try_advisory_lock($1)", true };
constexpr Statement unlock { "release_migration_lock", "SELECT pg_advisory_unlock($1)", true };

std::vector<AppliedMigration> readApplied(Connection& connection)
{
    std::vector<AppliedMigration> applied;
    if (!connection.exec(migrationsTableExists).boolean(0, 0))
        return applied;
    auto result = connection.exec(selectApplied);
    for (int row = 0; row < result.rows(); ++row)
        applied.push_back({ static_cast<int>(result.int64(row, 0)), std::string(result.text(row, 1)),
            std::string(result.text(row, 2)), std::string(result.text(row, 3)) });
    return applied;
}

// Holds the session-level advisory lock while migrations run.
class MigrationLock {
public:
    explicit MigrationLock(Connection& connection)
        : connection_(connection)
    {
        const auto giveUp = std::chrono::steady_clock::now() + connection.options().callTimeout;
        while (!connection_.exec(tryLock, Params(migrationLockKey)).boolean(0, 0)) {
            if (std::chrono::steady_clock::now() > giveUp)
                throw DbTimeout("another migrator holds the schema lock; gave up waiting");
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    ~MigrationLock()
    {
        try {
            connection_.exec(unlock, Params(migrationLockKey));
        } catch (const DbError&) {
            // A lost session released the lock with it.
        }
    }
    MigrationLock(const MigrationLock&) = delete;
    MigrationLock& operator=(const MigrationLock&) = delete;

private:
    Connection& connection_;
};

void checkCompatible(const std::vector<AppliedMigration>& applied, std::span<const Migration> migrations)
{
    const int latest = migrations.empty() ? 0 : migrations.back().version;
    for (const auto& done : applied) {
        if (done.version > latest)
            throw DbError("the database schema is at version " + std::to_string(applied.back().version)
                + ", newer than this program knows (" + std::to_string(latest) + "); use a newer batonctl");
        const auto& known = migrations[static_cast<std::size_t>(done.version - 1)];
        if (migrationChecksum(known.sql) != done.checksum)
            throw DbError("migration " + std::to_string(done.version) + " (" + std::string(known.name)
                + ") differs from the one applied to this database; migrations are append-only");
    }
}

} // namespace

std::string migrationChecksum(std::string_view sql)
{
    char hex[17];
    std::snprintf(
        hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits(sql.data(), sql.size())));
    return hex;
}

SchemaStatus schemaStatus(Connection& connection)
{
    SchemaStatus status;
    const auto migrations = knownMigrations();
    status.latestKnown = migrations.empty() ? 0 : migrations.back().version;
    status.applied = readApplied(connection);
    status.current = status.applied.empty() ? 0 : status.applied.back().version;
    for (const auto& migration : migrations) {
        bool done = false;
        for (const auto& applied : status.applied)
            done = done || applied.version == migration.version;
        if (!done)
            status.pending.push_back(migration.version);
    }
    return status;
}

std::vector<int> migrate(Connection& connection, std::span<const Migration> migrations)
{
    for (std::size_t i = 0; i < migrations.size(); ++i)
        if (migrations[i].version != static_cast<int>(i + 1))
            throw DbError("migrations must be numbered 1, 2, ... without gaps");
    MigrationLock lock(connection);
    connection.exec(createMigrationsTable);
    const auto applied = readApplied(connection);
    checkCompatible(applied, migrations);
    std::set<int> appliedVersions;
    for (const auto& migration : applied)
        appliedVersions.insert(migration.version);
    std::vector<int> done;
    for (const auto& migration : migrations) {
        if (appliedVersions.count(migration.version))
            continue;
        Transaction transaction(connection);
        try {
            connection.execScript(migration.sql);
        } catch (const DbError& error) {
            throw DbError("migration " + std::to_string(migration.version) + " ("
                    + std::string(migration.name) + ") failed: " + error.what(),
                error.sqlState());
        }
        connection.exec(
            insertApplied, Params(migration.version, migration.name, migrationChecksum(migration.sql)));
        transaction.commit();
        done.push_back(migration.version);
    }
    return done;
}

} // namespace baton::db
