#include "command.hpp"

#include "connection.hpp"
#include "migrations.hpp"
#include "options.hpp"

#include <iostream>

namespace baton::ctl {

namespace {

constexpr const char* dbUsage = "batonctl db migrate|status [--database CONNINFO]";

int migrateCommand(const Options& options)
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

int statusCommand(const Options& options)
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
    Options options(args, { { "database", true }, { "help", false } });
    if (options.flag("help")) {
        std::cout << "usage: " << dbUsage
                  << "\n  migrate  apply pending schema migrations (idempotent)"
                     "\n  status   show applied and pending migrations; exit 1 if not up to date\n";
        return exitOk;
    }
    options.expectPositional(1, 1, dbUsage);
    const std::string& action = options.positional()[0];
    if (action == "migrate")
        return migrateCommand(options);
    if (action == "status")
        return statusCommand(options);
    throw UsageError("unknown action '" + action + "'; usage: " + dbUsage);
}

} // namespace baton::ctl
