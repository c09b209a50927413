#include "command.hpp"

#include "db/connection.hpp"
#include "db/migrations.hpp"

#include <iostream>

namespace baton::ctl {

namespace {

int migrateCommand(const ParsedCommand& options)
{
    db::Connection connection(databaseConninfo(options));
    const auto applied = db::migrate(connection);
    const auto status = db::schemaStatus(connection);
    if (applied.empty()) {
        std::cout << "schema up to date at version " << status.current << "\n";
    } else {
        for (int version : applied)
            std::cout << "applied migration " << version << " ("
                      << db::knownMigrations()[static_cast<std::size_t>(version - 1)].name << ")\n";
        std::cout << "schema now at version " << status.current << "\n";
    }
    return exitOk;
}

int statusCommand(const ParsedCommand& options)
{
    db::Connection connection(databaseConninfo(options));
    const auto status = db::schemaStatus(connection);
    std::cout << "schema version " << status.current << " (this batonctl knows up to " << status.latestKnown
              << ")\n";
    for (const auto& applied : status.applied)
        std::cout << "  " << applied.version << "  " << applied.name << "  applied " << applied.appliedAt
                  << " UTC  checksum " << applied.checksum << "\n";
    for (int version : status.pending)
        std::cout << "  " << version << "  "
                  << db::knownMigrations()[static_cast<std::size_t>(version - 1)].name << "  pending\n";
    if (status.current > status.latestKnown) {
        std::cout << "the database is newer than this batonctl\n";
        return exitFailure;
    }
    return status.pending.empty() ? exitOk : exitFailure;
}

} // namespace

int dbCommand(std::span<const std::string> args)
{
    static const std::vector<Subcommand> subcommands = [] {
        CommandSpec migrate("batonctl db migrate", "Apply pending schema migrations (idempotent).");
        CommandSpec status("batonctl db status",
            "Show applied and pending migrations; exit 1 unless the schema is up to date.");
        addDatabaseOption(migrate);
        addDatabaseOption(status);
        return std::vector<Subcommand> { { migrate, migrateCommand }, { status, statusCommand } };
    }();
    return dispatch("batonctl db", "Database schema.", subcommands, args);
}

} // namespace baton::ctl
