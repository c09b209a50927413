#include "slurm_client.hpp"

#include "sbatch_args.hpp"

#include "common/users.hpp"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <system_error>

namespace baton::slurm {

namespace {

std::string trim(std::string s)
{
    auto space = [](unsigned char c) { return std::isspace(c) != 0; };
    s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
    s.erase(std::find_if_not(s.rbegin(), s.rend(), space).base(), s.end());
    return s;
}

// What a command said about its failure: its stderr, else its stdout, else how it ended.
std::string failureText(const CommandResult& r)
{
    std::string text = trim(r.err);
    if (text.empty())
        text = trim(r.out);
    if (text.empty())
        return r.describe();
    return r.describe() + ": " + text;
}

} // namespace

SlurmError::SlurmError(std::string command, std::string detail)
    : std::runtime_error(command + ": " + detail)
    , command_(std::move(command))
    , detail_(std::move(detail))
{ }

SlurmClient::SlurmClient(SlurmOptions options)
    : options_(std::move(options))
{
    std::string path;
    if (options_.searchPath) {
        path = *options_.searchPath;
    } else if (const char* own = std::getenv("PATH")) {
        path = own;
    }
    for (std::string* p :
        { &options_.squeue, &options_.sbatch, &options_.scancel, &options_.scontrol, &options_.sinfo }) {
        // A program that is missing now stays a bare name and fails when used, with a clear error.
        if (auto found = findProgram(*p, path))
            *p = std::filesystem::absolute(*found).string();
    }
}

CommandResult SlurmClient::run(std::vector<std::string> argv, std::chrono::milliseconds timeout,
    std::size_t maxBytes, const std::optional<uid_t>& asUser,
    const std::optional<std::filesystem::path>& workdir, int stdinFd) const
{
    if (argv.front().empty() || argv.front().front() != '/')
        throw SlurmError(formatArgv(argv), "program not found in the search path");
    CommandSpec spec;
    spec.timeout = timeout;
    spec.maxOutputBytes = maxBytes;
    spec.workdir = workdir;
    spec.stdinFd = stdinFd;
    spec.env.push_back("PATH=" + options_.childPath);
    if (asUser) {
        const os::UserEntry user = os::userOf(*asUser);
        spec.credentials = os::Credentials { user.uid, user.gid, os::groupsOf(user.name, user.gid) };
        spec.env.push_back("HOME=" + (user.home.empty() ? "/" : user.home));
        spec.env.push_back("USER=" + user.name);
        spec.env.push_back("LOGNAME=" + user.name);
        spec.env.push_back("SHELL=" + (user.shell.empty() ? "/bin/sh" : user.shell));
    }
    if (options_.slurmConf)
        spec.env.push_back("SLURM_CONF=" + *options_.slurmConf);
    spec.argv = std::move(argv);
    try {
        return runCommand(spec);
    } catch (const std::system_error& e) {
        throw SlurmError(formatArgv(spec.argv), e.what());
    }
}

QueueSnapshot SlurmClient::queue() const
{
    // --all: hidden partitions too; --states=all: finished jobs, for releases that honour the filter.
    std::vector<std::string> argv { options_.squeue, "--json", "--all", "--states=all" };
    const auto takenAt = static_cast<std::int64_t>(std::time(nullptr));
    const auto r = run(argv, options_.queryTimeout, options_.maxQueueBytes);
    if (!r.ok())
        throw SlurmError(formatArgv(argv), failureText(r));
    if (r.outTruncated)
        throw SlurmError(
            formatArgv(argv), "output larger than " + std::to_string(options_.maxQueueBytes) + " bytes");
    QueueSnapshot snapshot;
    try {
        snapshot = parseSqueueJson(r.out, takenAt);
    } catch (const SqueueParseError& e) {
        throw SlurmError(formatArgv(argv), e.what());
    }
    // squeue --json exits 0 with an error list (and no jobs) when slurmctld cannot be reached: that
    // is no answer, not an empty cluster.
    if (!snapshot.errors.empty())
        throw SlurmError(formatArgv(argv), snapshot.errors.front());
    return snapshot;
}

JobId parseSbatchOutput(const std::string& out)
{
    // "123" or "123;cluster", possibly after warnings on earlier lines.
    std::string line = trim(out);
    if (const auto nl = line.find_last_of('\n'); nl != std::string::npos)
        line = trim(line.substr(nl + 1));
    const std::string id = line.substr(0, line.find(';'));
    if (id.empty() || id.size() > 18
        || !std::all_of(id.begin(), id.end(), [](unsigned char c) { return std::isdigit(c); }))
        throw SlurmError("sbatch", "unexpected --parsable output: '" + trim(out) + "'");
    return std::stoll(id);
}

JobId SlurmClient::submit(const SubmitRequest& request) const
{
    if (request.key.empty())
        throw std::invalid_argument("submit: the idempotency key is empty");
    if ((request.script.empty() && request.scriptText.empty()) || request.workdir.empty())
        throw std::invalid_argument("submit: a script and a working directory are needed");
    // Checked when the chain was made; again here, in case a chain's stored options predate the check
    // or were written by other means. The caller's own --baton=CHAIN may be among them, once.
    if (const auto refused = checkSbatchArgs(request.args, ChainOption::AllowedOnce))
        throw std::invalid_argument("submit: " + *refused);
    if (const auto refused = checkScriptDirectives(request.scriptText))
        throw std::invalid_argument("submit: " + *refused);
    std::vector<std::string> argv { options_.sbatch, "--parsable", "--comment=" + request.key };
    argv.insert(argv.end(), request.args.begin(), request.args.end());
    if (request.seq) // after the chain's own options, which may not hold it (checkSbatchArgs)
        argv.push_back("--baton-seq=" + std::to_string(*request.seq));
    // A script given as text reaches sbatch on standard input through an anonymous memory file: no
    // file that another user could read or replace, and no pipe to keep fed.
    int scriptFd = -1;
    if (request.script.empty()) {
        scriptFd = memfd_create("baton-batch-script", MFD_CLOEXEC);
        if (scriptFd < 0)
            throw SlurmError("sbatch", std::string("memfd_create: ") + std::strerror(errno));
        const std::string& text = request.scriptText;
        std::size_t written = 0;
        while (written < text.size()) {
            const ssize_t n = ::write(scriptFd, text.data() + written, text.size() - written);
            if (n <= 0 && errno != EINTR) {
                ::close(scriptFd);
                throw SlurmError("sbatch", std::string("writing the script: ") + std::strerror(errno));
            }
            written += n > 0 ? static_cast<std::size_t>(n) : 0;
        }
        ::lseek(scriptFd, 0, SEEK_SET);
    } else {
        argv.push_back(request.script.string());
    }
    const auto r = [&] {
        try {
            auto result
                = run(argv, options_.submitTimeout, 1 << 20, request.owner, request.workdir, scriptFd);
            if (scriptFd >= 0)
                ::close(scriptFd);
            return result;
        } catch (...) {
            if (scriptFd >= 0)
                ::close(scriptFd);
            throw;
        }
    }();
    if (!r.ok())
        throw SlurmError(formatArgv(argv), failureText(r));
    try {
        return parseSbatchOutput(r.out);
    } catch (const SlurmError& e) {
        throw SlurmError(formatArgv(argv), e.detail());
    }
}

void SlurmClient::signal(JobId job, const std::string& name, SignalScope scope, std::optional<uid_t> asUser) const
{
    if (name.empty() || name.size() > 16
        || !std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isalnum(c); }))
        throw std::invalid_argument("signal: bad signal name '" + name + "'");
    std::vector<std::string> argv { options_.scancel, "--signal=" + name, std::to_string(job) };
    if (scope == SignalScope::Full)
        argv.insert(argv.begin() + 1, "--full");
    const auto r = run(argv, options_.controlTimeout, 1 << 20, asUser);
    if (!r.ok())
        throw SlurmError(formatArgv(argv), failureText(r));
}

void SlurmClient::cancel(JobId job, std::optional<uid_t> asUser) const
{
    std::vector<std::string> argv { options_.scancel, std::to_string(job) };
    const auto r = run(argv, options_.controlTimeout, 1 << 20, asUser);
    if (!r.ok())
        throw SlurmError(formatArgv(argv), failureText(r));
}

std::string SlurmClient::batchScript(JobId job, std::optional<uid_t> asUser) const
{
    std::vector<std::string> argv { options_.scontrol, "write", "batch_script", std::to_string(job), "-" };
    const auto r = run(argv, options_.queryTimeout, options_.maxScriptBytes, asUser);
    // scontrol exits 0 even when it could not fetch the script; an empty stdout is the real sign.
    if (!r.ok() || r.out.empty())
        throw SlurmError(formatArgv(argv), failureText(r));
    if (r.outTruncated)
        throw SlurmError(
            formatArgv(argv), "script larger than " + std::to_string(options_.maxScriptBytes) + " bytes");
    return r.out;
}

std::optional<QueueJob> SlurmClient::jobDetail(JobId job) const
{
    auto snapshot = queue();
    for (auto& j : snapshot.jobs)
        if (j.jobId == job)
            return std::move(j);
    return std::nullopt;
}

int SlurmClient::usableNodes() const
{
    std::vector<std::string> argv { options_.sinfo, "--json" };
    const auto r = run(argv, options_.queryTimeout, options_.maxQueueBytes);
    if (!r.ok() || r.outTruncated)
        throw SlurmError(formatArgv(argv), failureText(r));
    try {
        return parseSinfoUsableNodes(r.out);
    } catch (const SqueueParseError& e) {
        throw SlurmError(formatArgv(argv), e.what());
    }
}

} // namespace baton::slurm
