// batonctl: the command line of users and operators. `batonctl GROUP ...` dispatches through the table
// of command groups (commands.cpp).
#include "command.hpp"

#include "db/errors.hpp"
#include "trace/trace_reader.hpp"

#include <csignal>
#include <iostream>
#include <vector>

namespace {

void printUsage(std::ostream& out)
{
    out << "usage: batonctl COMMAND [ARGS...]\n\ncommands:\n";
    for (const auto& group : baton::ctl::commandGroups())
        out << "  " << group.name << std::string(10 - std::min<std::size_t>(group.name.size(), 9), ' ')
            << group.summary << "\n";
    out << "\n`batonctl COMMAND --help` for a command's arguments and options.\n"
           "Chain commands talk to batond at --server URL, else $BATON_SERVER, else http://127.0.0.1:8760,\n"
           "signed with your MUNGE credential. db, trace and sim use the database directly: --database\n"
           "CONNINFO, else $BATON_DATABASE, else the PG* environment.\n"
           "Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 permission denied, 5 conflict.\n";
}

} // namespace

int main(int argc, char** argv)
{
    using namespace baton::ctl;
    // batond may close a connection before reading a whole request (a body over its limit): the write
    // must fail with EPIPE and be reported, not kill batonctl silently.
    std::signal(SIGPIPE, SIG_IGN);
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        printUsage(std::cerr);
        return exitUsage;
    }
    if (args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
        printUsage(std::cout);
        return exitOk;
    }
    if (args[0] == "--version")
        args[0] = "version";
    for (const auto& group : commandGroups()) {
        if (group.name != args[0])
            continue;
        const std::string prefix = "batonctl " + std::string(group.name) + ": ";
        try {
            return group.run(std::span<const std::string>(args).subspan(1));
        } catch (const UsageError& error) {
            const std::string command
                = error.command().empty() ? "batonctl " + std::string(group.name) : error.command();
            std::cerr << command << ": " << error.what() << "\n";
            if (std::string_view(error.what()).find("usage:") == std::string_view::npos)
                std::cerr << "(usage: " << command << " --help)\n";
            return exitUsage;
        } catch (const CommandFailure& error) {
            std::cerr << "batonctl: " << error.what() << "\n";
            return error.exitCode();
        } catch (const baton::db::DbError& error) {
            std::cerr << prefix << "database error: " << error.what() << "\n";
            return exitFailure;
        } catch (const baton::trace::TraceError& error) {
            std::cerr << prefix << error.what() << "\n";
            return exitFailure;
        } catch (const std::exception& error) {
            std::cerr << prefix << error.what() << "\n";
            return exitFailure;
        }
    }
    std::cerr << "batonctl: unknown command '" << args[0] << "'\n\n";
    printUsage(std::cerr);
    return exitUsage;
}
