// baton-ckpt: look after the checkpoints of a chain directory (list, verify, inspect, prune, export).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/error.hpp"
#include "baton/ckpt/manifest.hpp"
#include "baton_version.h"
#include "checkpointer/src/io.hpp"

namespace fs = std::filesystem;
using namespace baton::ckpt;

namespace {

constexpr int kUsageError = 2;

const char* kUsage = R"(usage: baton-ckpt COMMAND [ARGS]

  ls CHAIN_DIR                 checkpoints of a chain: iteration, commit time, size, status (with
                               final / training done and the writing job and restart)
  verify PATH                  read every byte and check all checksums; PATH is a chain directory
                               (all committed checkpoints) or one checkpoint directory
  inspect PATH                 print the manifest of a checkpoint (of a chain: the newest committed);
                               job_id, seq, final and training_done as a reader reads them
  prune CHAIN_DIR [--keep N]   keep the newest N committed checkpoints (default: BATON_KEEP or 2)
  export --format dcp CKPT DIR write checkpoint CKPT (a ckpt-<iteration> directory of baton.torch) as a
                               PyTorch Distributed Checkpoint in DIR: runs `python3 -m baton.dcp export`
                               (BATON_PYTHON names another interpreter), which needs the baton Python
                               package and PyTorch
  --version                    print the version
  --help                       print this help

Exit status: 0 success, 1 a checkpoint failed verification or could not be read, 2 bad usage.
)";

int usage(const std::string& problem)
{
    std::cerr << "baton-ckpt: " << problem << "\n\n" << kUsage;
    return kUsageError;
}

std::string formatTime(double unixSeconds)
{
    std::time_t t = static_cast<std::time_t>(unixSeconds);
    std::tm tm {};
    gmtime_r(&t, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return text;
}

std::string formatBytes(std::uint64_t bytes)
{
    const char* units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024 && unit < 4) {
        value /= 1024;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
    return text;
}

bool isCheckpointDir(const fs::path& path)
{
    return parseCheckpointDirName(path.filename().string()).has_value() || fs::exists(path / kManifestName);
}

Manifest loadManifest(const fs::path& checkpointDir)
{
    return parseManifest(io::readSmallFile(checkpointDir / kManifestName));
}

// "committed, final, training done (job 123, seq 2)"
std::string committedStatus(const Manifest& manifest)
{
    std::string status = "committed";
    if (manifest.final)
        status += ", final";
    if (manifest.trainingDone)
        status += ", training done";
    if (manifest.jobId || manifest.chainSeq) {
        status += " (job " + (manifest.jobId ? std::to_string(*manifest.jobId) : std::string("?"));
        status
            += ", seq " + (manifest.chainSeq ? std::to_string(*manifest.chainSeq) : std::string("?")) + ")";
    }
    return status;
}

int listChain(const fs::path& chain)
{
    std::printf("%-14s  %-20s  %10s  %s\n", "ITERATION", "CREATED", "SIZE", "STATUS");
    for (const auto& info : listCheckpoints(chain)) {
        std::string created = "-", size = "-", status;
        if (info.statError != 0) {
            status
                = std::string("unknown (cannot examine the manifest: ") + std::strerror(info.statError) + ")";
        } else if (!info.committed) {
            status = "incomplete (no manifest)";
        } else {
            try {
                auto manifest = loadManifest(info.dir);
                created = formatTime(manifest.createdUnix);
                size = formatBytes(manifest.totalBytes);
                status = committedStatus(manifest);
            } catch (const Error& e) {
                status = std::string("unreadable: ") + e.what();
            }
        }
        std::printf("%-14llu  %-20s  %10s  %s\n", static_cast<unsigned long long>(info.iteration),
            created.c_str(), size.c_str(), status.c_str());
    }
    return 0;
}

int verify(const fs::path& path)
{
    std::vector<fs::path> targets;
    if (isCheckpointDir(path)) {
        targets.push_back(path);
    } else {
        for (const auto& info : listCheckpoints(path)) {
            if (info.committed)
                targets.push_back(info.dir);
        }
        if (targets.empty()) {
            std::cerr << "baton-ckpt: no committed checkpoint in " << path.string() << "\n";
            return 1;
        }
    }
    int failures = 0;
    for (const auto& dir : targets) {
        VerifyResult result;
        try {
            result = verifyCheckpoint(dir);
        } catch (const FormatError& e) {
            result.reason = e.what();
        }
        if (result.ok) {
            std::printf("%s: ok (%s, %zu regions, %zu blobs)\n", dir.string().c_str(),
                formatBytes(result.manifest->totalBytes).c_str(), result.manifest->regions.size(),
                result.manifest->blobs.size());
        } else {
            std::printf("%s: FAILED: %s\n", dir.string().c_str(), result.reason.c_str());
            ++failures;
        }
    }
    return failures == 0 ? 0 : 1;
}

int inspect(const fs::path& path)
{
    fs::path dir = path;
    if (!isCheckpointDir(path)) {
        auto list = listCheckpoints(path);
        auto newest = std::find_if(list.rbegin(), list.rend(), [](const auto& i) { return i.committed; });
        if (newest == list.rend()) {
            std::cerr << "baton-ckpt: no committed checkpoint in " << path.string() << "\n";
            return 1;
        }
        dir = newest->dir;
    }
    auto manifest = loadManifest(dir);
    // Older manifests lack the handover fields: show them as every reader takes them.
    auto& document = manifest.document;
    auto number = [](const std::optional<std::uint64_t>& value) {
        return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
    };
    for (auto [key, value] :
        { std::pair { "job_id", number(manifest.jobId) }, std::pair { "seq", number(manifest.chainSeq) },
            std::pair { "final", nlohmann::json(manifest.final) },
            std::pair { "training_done", nlohmann::json(manifest.trainingDone) } }) {
        if (!document.contains(key))
            document[key] = value;
    }
    std::cout << document.dump(2) << "\n";
    return 0;
}

int prune(const fs::path& chain, int keep)
{
    removeStaleTemporaries(chain);
    auto removed = pruneChain(chain, keep);
    for (const auto& path : removed)
        std::printf("removed %s\n", path.string().c_str());
    std::printf("%zu removed, newest %d committed kept\n", removed.size(), keep);
    return 0;
}

int parseKeep(const std::string& text)
{
    char* end = nullptr;
    long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < 1 || value > 1000000)
        throw ConfigError("--keep '" + text + "' is not a whole number >= 1");
    return static_cast<int>(value);
}

// The export is baton.dcp's: it writes with DCP's own writer, which only PyTorch has. The interpreter
// replaces this process (no shell: the paths are passed as they are).
int exportWithPython(const std::string& checkpoint, const std::string& destination)
{
    const char* python = std::getenv("BATON_PYTHON");
    if (python == nullptr || *python == '\0')
        python = "python3";
    std::vector<std::string> words { python, "-m", "baton.dcp", "export", checkpoint, destination };
    std::vector<char*> argv;
    for (auto& word : words)
        argv.push_back(word.data());
    argv.push_back(nullptr);
    ::execvp(python, argv.data());
    std::cerr << "baton-ckpt: cannot run " << python << ": " << std::strerror(errno) << "\n";
    return 1;
}

} // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty())
        return usage("no command given");
    const std::string& command = args[0];
    if (command == "--version") {
        std::printf("baton-ckpt %s (manifest format %d)\n", BATON_VERSION, kFormatVersion);
        return 0;
    }
    if (command == "--help" || command == "-h") {
        std::cout << kUsage;
        return 0;
    }
    try {
        if (command == "ls" || command == "verify" || command == "inspect") {
            if (args.size() != 2)
                return usage(command + " takes exactly one path");
            if (!fs::is_directory(args[1]))
                return usage(args[1] + " is not a directory");
            if (command == "ls")
                return listChain(args[1]);
            if (command == "verify")
                return verify(args[1]);
            return inspect(args[1]);
        }
        if (command == "prune") {
            int keep = 2;
            if (const char* env = std::getenv("BATON_KEEP"); env != nullptr)
                keep = parseKeep(env);
            std::string dir;
            for (std::size_t i = 1; i < args.size(); ++i) {
                if (args[i] == "--keep" && i + 1 < args.size())
                    keep = parseKeep(args[++i]);
                else if (dir.empty() && !args[i].starts_with("-"))
                    dir = args[i];
                else
                    return usage("unexpected argument '" + args[i] + "'");
            }
            if (dir.empty() || !fs::is_directory(dir))
                return usage("prune needs a chain directory");
            return prune(dir, keep);
        }
        if (command == "export") {
            if (args.size() != 5 || args[1] != "--format")
                return usage("export takes --format FORMAT CHECKPOINT DIR");
            if (args[2] != "dcp")
                return usage("export knows the format dcp, not '" + args[2] + "'");
            if (!fs::is_directory(args[3]))
                return usage(args[3] + " is not a directory");
            return exportWithPython(args[3], args[4]);
        }
        return usage("unknown command '" + command + "'");
    } catch (const ConfigError& e) {
        return usage(e.what());
    } catch (const std::exception& e) {
        std::cerr << "baton-ckpt: " << e.what() << "\n";
        return 1;
    }
}
