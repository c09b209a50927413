// Trace import speed and memory: `batonctl trace import` against `psql \copy` of the same rows
// pre-converted to CSV, on a private PostgreSQL server, and batonctl's peak memory on the trace and
// on a concatenation of it several times over (it must not grow with the file).
//
// Then a long import: a generated SWF trace of --rows rows (default 3,000,000), imported by batonctl
// with the session's default statement_timeout (60 s), against psql \copy of the same rows.
//
//   import_bench [--repeat N] [--scale K] [--rows R]   (BATONCTL, BATON_TRACE_DIR from the environment)
#include "db/connection.hpp"
#include "db/migrations.hpp"
#include "trace/fields.hpp"
#include "trace/trace_reader.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using baton::trace::TraceJob;

struct Outcome {
    int exitCode = -1;
    double seconds = 0;
    long maxRssKiB = 0;
    std::string output;
};

// Runs argv without a shell; reports wall time and the child's peak resident set.
Outcome spawn(const std::vector<std::string>& argv, const fs::path& outputFile)
{
    std::vector<char*> args;
    for (const auto& arg : argv)
        args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, outputFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    const auto started = std::chrono::steady_clock::now();
    const int error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0)
        throw std::runtime_error("cannot run " + argv[0]);
    int status = 0;
    rusage usage {};
    wait4(pid, &status, 0, &usage);
    Outcome outcome;
    outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    outcome.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    outcome.maxRssKiB = usage.ru_maxrss;
    std::ifstream in(outputFile);
    outcome.output.assign(std::istreambuf_iterator<char>(in), {});
    return outcome;
}

long peakRssKiB(pid_t pid)
{
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmHWM:", 0) == 0)
            return std::atol(line.c_str() + 6);
    return -1;
}

// Like spawn(), but the peak memory is the program's own: getrusage's ru_maxrss of a child also
// counts the address space it was forked from (here, this benchmark), so the child is traced and its
// VmHWM read at its exit stop, when its memory is still mapped. Falls back to ru_maxrss if tracing is
// not permitted.
Outcome spawnMeasured(const std::vector<std::string>& argv, const fs::path& outputFile)
{
    std::vector<char*> args;
    for (const auto& arg : argv)
        args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    const auto started = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid < 0)
        throw std::runtime_error("fork failed");
    if (pid == 0) {
        const int fd = ::open(outputFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
        execvp(args[0], args.data());
        _exit(127);
    }
    Outcome outcome;
    int status = 0;
    rusage usage {};
    bool traced = false;
    for (;;) {
        wait4(pid, &status, 0, &usage);
        if (WIFEXITED(status) || WIFSIGNALED(status))
            break;
        if (!WIFSTOPPED(status))
            continue;
        int forward = 0;
        if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
            outcome.maxRssKiB = peakRssKiB(pid);
        } else if (WSTOPSIG(status) == SIGTRAP && !traced) {
            traced = ptrace(PTRACE_SETOPTIONS, pid, nullptr, PTRACE_O_TRACEEXIT) == 0;
        } else {
            forward = WSTOPSIG(status);
        }
        ptrace(PTRACE_CONT, pid, nullptr, reinterpret_cast<void*>(static_cast<long>(forward)));
    }
    outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    outcome.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (outcome.maxRssKiB <= 0)
        outcome.maxRssKiB = usage.ru_maxrss;
    std::ifstream in(outputFile);
    outcome.output.assign(std::istreambuf_iterator<char>(in), {});
    return outcome;
}

Outcome mustRun(const std::vector<std::string>& argv, const fs::path& outputFile, bool measured = false)
{
    auto outcome = measured ? spawnMeasured(argv, outputFile) : spawn(argv, outputFile);
    if (outcome.exitCode != 0)
        throw std::runtime_error(argv[0] + " " + argv[1] + " failed:\n" + outcome.output);
    return outcome;
}

class PrivateServer {
public:
    PrivateServer(fs::path script, fs::path dir)
        : script_(std::move(script))
        , dir_(std::move(dir))
    {
        auto started = mustRun({ "bash", script_, "start", dir_ }, dir_.parent_path() / "pg-start.out");
        auto text = started.output;
        while (!text.empty() && text.back() == '\n')
            text.pop_back();
        conninfo_ = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    }
    ~PrivateServer() { spawn({ "bash", script_, "stop", dir_ }, dir_.parent_path() / "pg-stop.out"); }
    const std::string& conninfo() const { return conninfo_; }

private:
    fs::path script_, dir_;
    std::string conninfo_;
};

class TempDir {
public:
    TempDir()
    {
        std::string pattern = (fs::temp_directory_path() / "baton-bench-XXXXXX").string();
        if (!mkdtemp(pattern.data()))
            throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
        chmod(path_.c_str(), 0755); // the server may run as another user
    }
    ~TempDir()
    {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

std::string csvText(const std::string& text)
{
    std::string out = "\"";
    for (char c : text) {
        if (c == '"')
            out += '"';
        out += c;
    }
    return out + "\""; // always quoted, so that an empty name is '' and not NULL
}

std::string csvTime(std::int64_t epoch)
{
    return baton::trace::formatTimestamp(epoch) + "+00"; // UTC, for PostgreSQL's timestamptz
}

template<typename T> std::string csvOptional(T value)
{
    return value < 0 ? std::string() : std::to_string(value);
}

// The same columns and values batonctl stores, as CSV for psql's \copy.
std::size_t writeCsv(const fs::path& trace, const fs::path& csv, std::int64_t traceId)
{
    auto reader = baton::trace::openTrace(trace);
    std::ofstream out(csv);
    TraceJob job;
    std::size_t seq = 0;
    while (reader->next(job)) {
        out << traceId << ',' << ++seq << ',' << job.jobId << ',' << csvText(job.name) << ','
            << csvText(job.user) << ',' << csvTime(job.submit) << ','
            << (job.start ? csvTime(*job.start) : "") << ',' << (job.end ? csvTime(*job.end) : "") << ','
            << csvOptional(job.timeLimit) << ',' << job.nodes << ',' << csvOptional(job.priority) << ','
            << csvOptional(job.exitCode) << ',' << (job.state.empty() ? "" : csvText(job.state)) << ','
            << csvOptional(job.requestedProcs) << ',' << csvOptional(job.requestedTime) << ','
            << csvOptional(job.runTime) << ',' << csvOptional(job.wait) << '\n';
    }
    return seq;
}

// The trace's data rows `times` over, behind its header.
void concatenate(const fs::path& trace, const fs::path& out, int times)
{
    std::ifstream in(trace);
    std::string line, header;
    std::vector<std::string> headerLines;
    for (int i = 0; i < 3 && std::getline(in, line); ++i)
        header += line + "\n";
    std::string body(std::istreambuf_iterator<char>(in), {});
    std::ofstream file(out);
    file << header;
    for (int i = 0; i < times; ++i)
        file << body;
}

// A synthetic SWF trace of `rows` jobs (varied waits, run times and sizes).
void writeSyntheticSwf(const fs::path& path, long rows)
{
    std::ofstream out(path);
    out << "; UnixStartTime: 1672531200\n";
    for (long i = 1; i <= rows; ++i)
        out << i << ' ' << i * 7 << ' ' << i % 600 << ' ' << 60 + i % 3600 << ' ' << 1 + i % 64 << " -1 -1 "
            << 1 + i % 64 << " 7200 -1 1 " << i % 97 << " 1 -1 0 -1 -1 -1\n";
}

double median(std::vector<double> values)
{
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

constexpr baton::db::Statement insertTrace { "bench_insert_trace",
    "INSERT INTO traces (name, format, source) VALUES ($1, 'csv', 'benchmark') RETURNING id" };

struct Options {
    int repeat = 3;
    int scale = 4;
    long longRows = 3'000'000;
};

Options parseOptions(int argc, char** argv)
{
    Options options;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string option = argv[i];
        if (option == "--rows")
            options.longRows = std::max(0L, std::atol(argv[i + 1]));
        else if (option == "--repeat")
            options.repeat = std::max(1, std::atoi(argv[i + 1]));
        else if (option == "--scale")
            options.scale = std::max(2, std::atoi(argv[i + 1]));
    }
    return options;
}

// What each import runs against: the private server's database, batonctl, and the file that takes the
// output of each program run.
struct Setup {
    baton::db::Connection& connection;
    std::string database;
    std::string batonctl;
    fs::path work;
    fs::path log;
};

// The baseline: `csv` (rows converted beforehand, not timed) loaded by psql's \copy; its seconds.
double psqlCopySeconds(const Setup& setup, const fs::path& csv)
{
    const std::string copy = "\\copy trace_jobs (trace_id, seq, job_id, name, user_name, submit_time, "
                             "start_time, end_time, time_limit_s, nodes, priority, exit_code, state, "
                             "requested_procs, requested_time_s, run_time_s, wait_s) FROM '"
        + csv.string() + "' WITH (FORMAT csv)";
    return mustRun(
        { "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", setup.database, "-c", copy }, setup.log)
        .seconds;
}

Outcome batonctlImport(const Setup& setup, const fs::path& trace, const std::string& name)
{
    return mustRun(
        { setup.batonctl, "trace", "import", trace.string(), "--name", name, "--database", setup.database },
        setup.log, true);
}

void printImportTable(std::size_t rows, double psqlSeconds, double ourSeconds)
{
    std::printf(
        "| %-44s | %8s | %9s | %10s | %14s |\n", "method", "rows", "seconds", "rows/s", "vs psql \\copy");
    std::printf("|%s|%s|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(10, '-').c_str(),
        std::string(11, '-').c_str(), std::string(12, '-').c_str(), std::string(16, '-').c_str());
    std::printf("| %-44s | %8zu | %9.3f | %10.0f | %14.2f |\n", "psql \\copy of pre-converted CSV (baseline)",
        rows, psqlSeconds, static_cast<double>(rows) / psqlSeconds, 1.0);
    std::printf("| %-44s | %8zu | %9.3f | %10.0f | %13.2fx |\n", "batonctl trace import (parse + COPY)", rows,
        ourSeconds, static_cast<double>(rows) / ourSeconds, psqlSeconds / ourSeconds);
}

// The trace imported `repeat` times each way (medians), then `scale` times over by batonctl once, to
// show that its peak memory does not grow with the input.
void compareOnTheTrace(const Setup& setup, const fs::path& trace, int repeat, int scale)
{
    std::vector<double> ours, baseline, oursRss;
    std::size_t rows = 0;
    for (int run = 0; run < repeat; ++run) {
        const auto traceId
            = setup.connection.exec(insertTrace, baton::db::Params("csv-" + std::to_string(run))).int64(0, 0);
        const fs::path csv = setup.work / "ls6.csv";
        rows = writeCsv(trace, csv, traceId);
        baseline.push_back(psqlCopySeconds(setup, csv));
        auto imported = batonctlImport(setup, trace, "ls6-" + std::to_string(run));
        ours.push_back(imported.seconds);
        oursRss.push_back(static_cast<double>(imported.maxRssKiB));
    }

    const fs::path scaled = setup.work / "ls6-scaled.log";
    concatenate(trace, scaled, scale);
    auto big = batonctlImport(setup, scaled, "ls6-scaled");
    const auto bigRows = rows * static_cast<std::size_t>(scale);
    auto version = mustRun({ setup.batonctl, "version" }, setup.log, true);

    const double baseSeconds = median(baseline);
    const double ourSeconds = median(ours);
    std::printf("\nTrace import of ls6-a100 (%zu rows), median of %d runs, whole processes (connect "
                "included)\n\n",
        rows, repeat);
    printImportTable(rows, baseSeconds, ourSeconds);
    std::printf("\nPeak memory of batonctl trace import (VmHWM at exit)\n\n");
    std::printf("| %-22s | %10s | %11s | %14s |\n", "input", "rows", "MiB on disk", "peak RSS (KiB)");
    std::printf("|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(12, '-').c_str(),
        std::string(13, '-').c_str(), std::string(16, '-').c_str());
    std::printf("| %-22s | %10zu | %11.1f | %14.0f |\n", "ls6-a100", rows,
        static_cast<double>(fs::file_size(trace)) / 1048576.0, median(oursRss));
    std::printf("| %-22s | %10zu | %11.1f | %14ld |\n", ("ls6-a100 x" + std::to_string(scale)).c_str(),
        bigRows, static_cast<double>(fs::file_size(scaled)) / 1048576.0, big.maxRssKiB);
    std::printf("| %-22s | %10s | %11s | %14ld |\n", "batonctl version", "-", "-", version.maxRssKiB);
    std::printf("\nratio %.2f (target >= 0.80); peak RSS x%d input / x1 input = %.2f\n",
        baseSeconds / ourSeconds, scale, static_cast<double>(big.maxRssKiB) / median(oursRss));
    if (big.output.find("accepted " + std::to_string(bigRows)) == std::string::npos)
        throw std::runtime_error("the scaled import did not store every row:\n" + big.output);
}

// One import longer than the session's statement_timeout (60 s by default) on a slow machine: it must
// not be cancelled while batonctl still parses and sends rows.
void longImport(const Setup& setup, long rows)
{
    const fs::path synthetic = setup.work / "synthetic.swf";
    writeSyntheticSwf(synthetic, rows);
    const auto traceId = setup.connection.exec(insertTrace, baton::db::Params("csv-long")).int64(0, 0);
    const fs::path csv = setup.work / "synthetic.csv";
    const auto rowsLong = writeCsv(synthetic, csv, traceId);
    const double psqlSeconds = psqlCopySeconds(setup, csv);
    auto imported = batonctlImport(setup, synthetic, "synthetic");
    if (imported.output.find("accepted " + std::to_string(rowsLong)) == std::string::npos)
        throw std::runtime_error("the long import did not store every row:\n" + imported.output);
    std::printf("\nLong import: generated SWF, %zu rows (%.1f MiB), one run each\n\n", rowsLong,
        static_cast<double>(fs::file_size(synthetic)) / 1048576.0);
    printImportTable(rowsLong, psqlSeconds, imported.seconds);
    std::printf("peak RSS of the long import: %ld KiB\n", imported.maxRssKiB);
}

} // namespace

int main(int argc, char** argv)
{
    const Options options = parseOptions(argc, argv);
    const fs::path sourceRoot = BATON_SOURCE_ROOT;
    fs::path traceDir = std::getenv("BATON_TRACE_DIR") ? fs::path(std::getenv("BATON_TRACE_DIR"))
                                                       : sourceRoot.parent_path() / "shared" / "traces";
    const fs::path trace = traceDir / "ls6-a100.log";
    if (!fs::is_regular_file(trace)) {
        std::cout << "skipped: " << trace << " not found (set BATON_TRACE_DIR)\n";
        return 77;
    }
    const std::string batonctl = std::getenv("BATONCTL") ? std::getenv("BATONCTL") : "batonctl";

    try {
        TempDir work;
        PrivateServer server(sourceRoot / "deploy" / "local" / "pg.sh", work.path() / "pg");
        const std::string database = server.conninfo();
        baton::db::Connection connection(database);
        baton::db::migrate(connection);
        const Setup setup { connection, database, batonctl, work.path(), work.path() / "out.txt" };
        compareOnTheTrace(setup, trace, options.repeat, options.scale);
        if (options.longRows > 0)
            longImport(setup, options.longRows);
    } catch (const std::exception& error) {
        std::cerr << "import_bench: " << error.what() << "\n";
        return 1;
    }
    return 0;
}
