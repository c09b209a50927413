// Schema migrations: the files schema/NNNN_name.sql, built into the program. Each runs in its own
// transaction and is recorded with its checksum in schema_migrations; an advisory lock keeps two
// migrators apart; a database whose schema is newer than the program knows is refused.
#pragma once

#include "connection.hpp"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace baton::db {

struct Migration {
    int version;
    std::string_view name;
    std::string_view sql;
};

// Generated at build time from schema/*.sql, in version order 1, 2, ...
std::span<const Migration> knownMigrations();

// Hex XXH3-64 of a migration's SQL text.
std::string migrationChecksum(std::string_view sql);

struct AppliedMigration {
    int version = 0;
    std::string name;
    std::string checksum;
    std::string appliedAt;
};

struct SchemaStatus {
    int current = 0; // highest applied version, 0 for an empty database
    int latestKnown = 0; // highest version this program carries
    std::vector<AppliedMigration> applied;
    std::vector<int> pending; // known but not applied
};

// Reads the state without changing anything.
SchemaStatus schemaStatus(Connection& connection);

// Applies the pending migrations in order; returns the versions applied (empty when up to date).
// Throws DbError if the database is newer than this program, or if an applied migration's text
// has changed since.
std::vector<int> migrate(Connection& connection, std::span<const Migration> migrations = knownMigrations());

} // namespace baton::db
