#include "checkpoint_scan.hpp"

#include "common/baton_contract.hpp"
#include "unique_fd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <queue>
#include <stdexcept>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace baton::spank {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int supportedFormatVersion = 3; // 2: a checkpoint of several ranks; 3: with tensor pieces
constexpr std::int64_t maxWorldSize = 1 << 20;
constexpr const char* tuningKeys[] = { "interval", "iteration_seconds", "snapshot_seconds", "persist_seconds",
    "overhead_percent", "stall_seconds" };

struct DirCloser {
    void operator()(DIR* dir) const { ::closedir(dir); }
};

std::optional<std::string> readManifest(int chainDirFd, const std::string& name, std::size_t maxBytes)
{
    UniqueFd dir(::openat(chainDirFd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) {
        return std::nullopt;
    }
    // O_NONBLOCK: a FIFO named manifest.json must not block the open.
    UniqueFd file(::openat(dir.get(), "manifest.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    struct stat info { };
    if (!file.valid() || ::fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode)
        || static_cast<std::size_t>(info.st_size) > maxBytes) {
        return std::nullopt;
    }
    // The size may grow after fstat: the read stops one byte past the limit.
    std::string text;
    char buffer[65536];
    while (text.size() <= maxBytes) {
        const ssize_t got = ::read(file.get(), buffer, std::min(sizeof buffer, maxBytes + 1 - text.size()));
        if (got < 0) {
            return std::nullopt;
        }
        if (got == 0) {
            return text;
        }
        text.append(buffer, static_cast<std::size_t>(got));
    }
    return std::nullopt;
}

std::optional<std::int64_t> optionalInteger(const nlohmann::json& manifest, const char* key)
{
    const auto found = manifest.find(key);
    if (found == manifest.end() || !found->is_number_integer()) {
        return std::nullopt;
    }
    // Forwarded too: outside the contract's range it is dropped, like a value of the wrong type.
    if (found->is_number_unsigned()
        && found->get<std::uint64_t>() > static_cast<std::uint64_t>(contract::kReportedIntegerMax)) {
        return std::nullopt;
    }
    const auto value = found->get<std::int64_t>();
    if (value < 0 || value > static_cast<std::int64_t>(contract::kReportedIntegerMax)) {
        return std::nullopt;
    }
    return value;
}

// The numbers an event forwards to batond, range-checked where they are read (the contract's ranges:
// a value a user writes must fit every conversion and column on the way). Throws std::runtime_error
// naming the key: a manifest with a value out of range is not a usable checkpoint.
std::runtime_error outOfRange(const char* key, const nlohmann::json& value)
{
    std::string text = value.dump();
    if (text.size() > 40) {
        text = text.substr(0, 40) + "...";
    }
    return std::runtime_error(std::string("manifest ") + key + " out of range: " + text);
}

std::int64_t reportedInteger(const nlohmann::json& manifest, const char* key, bool (*inRange)(double))
{
    const nlohmann::json& value = manifest.at(key);
    if (!value.is_number_integer()) {
        throw outOfRange(key, value);
    }
    // A huge unsigned value would wrap to a negative int64; the limit is far below INT64_MAX anyway.
    if (value.is_number_unsigned()
        && value.get<std::uint64_t>() > static_cast<std::uint64_t>(contract::kReportedIntegerMax)) {
        throw outOfRange(key, value);
    }
    const auto number = value.get<std::int64_t>();
    if (number > static_cast<std::int64_t>(contract::kReportedIntegerMax)
        || !inRange(static_cast<double>(number))) {
        throw outOfRange(key, value);
    }
    return number;
}

double reportedNumber(const nlohmann::json& manifest, const char* key, bool (*inRange)(double))
{
    const nlohmann::json& value = manifest.at(key);
    if (!value.is_number() || !inRange(value.get<double>())) {
        throw outOfRange(key, value);
    }
    return value.get<double>();
}

bool flag(const nlohmann::json& manifest, const char* key)
{
    const auto found = manifest.find(key);
    return found != manifest.end() && found->is_boolean() && found->get<bool>();
}

} // namespace

nlohmann::json filterTuning(const nlohmann::json& tuning)
{
    if (!tuning.is_object()) {
        return nullptr;
    }
    nlohmann::json kept = nlohmann::json::object();
    for (const char* key : tuningKeys) {
        const auto found = tuning.find(key);
        if (found == tuning.end() || !found->is_number()) {
            continue;
        }
        if (found->is_number_float() && !std::isfinite(found->get<double>())) {
            continue;
        }
        kept[key] = *found;
    }
    return kept;
}

CheckpointSummary summarizeManifest(const std::string& name, const std::string& manifestText, int maxDepth)
{
    // The parser itself is iterative; the limit keeps a hostile manifest from building a structure that
    // copying or printing would recurse through. `depth` counts the enclosing containers.
    const auto manifest = nlohmann::json::parse(
        manifestText, [maxDepth](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
            if ((event == nlohmann::json::parse_event_t::object_start
                    || event == nlohmann::json::parse_event_t::array_start)
                && depth >= maxDepth) {
                throw std::runtime_error("manifest nested deeper than " + std::to_string(maxDepth));
            }
            return true;
        });
    if (!manifest.is_object()) {
        throw std::runtime_error("manifest is not a JSON object");
    }
    const int version = manifest.at("format_version").get<int>();
    if (version < 1 || version > supportedFormatVersion) {
        throw std::runtime_error("unsupported manifest format_version " + std::to_string(version));
    }
    CheckpointSummary summary;
    summary.name = name;
    summary.iteration = reportedInteger(manifest, "iteration", contract::reportedIterationInRange);
    summary.createdUnix = reportedNumber(manifest, "created_unix", contract::reportedCreatedInRange);
    summary.totalBytes = reportedInteger(manifest, "total_bytes", contract::reportedBytesInRange);
    summary.final = flag(manifest, "final");
    summary.trainingDone = flag(manifest, "training_done");
    // Manifests written before the rename name the seq `restart_count`.
    summary.chainSeq = manifest.contains(contract::kManifestSeqKey)
        ? optionalInteger(manifest, contract::kManifestSeqKey)
        : optionalInteger(manifest, contract::kLegacyManifestSeqKey);
    summary.jobId = optionalInteger(manifest, "job_id");
    if (const auto tuning = manifest.find("tuning"); tuning != manifest.end()) {
        summary.tuning = filterTuning(*tuning);
    }
    if (version >= 2) {
        summary.worldSize = manifest.at("world_size").get<std::int64_t>();
        if (summary.worldSize < 1 || summary.worldSize > maxWorldSize) {
            throw std::runtime_error("manifest world_size out of range");
        }
        // Only the known layout names are counted: the counts go to batond, names from a user file do not.
        summary.regionLayouts = nlohmann::json::object();
        for (const auto& region : manifest.at("regions")) {
            const auto layout = region.is_object() ? region.find("layout") : region.end();
            if (layout != region.end() && layout->is_string()
                && (*layout == "rank" || *layout == "replicated" || *layout == "sharded" || *layout == "box")) {
                auto& count = summary.regionLayouts[layout->get<std::string>()];
                count = count.is_null() ? 1 : count.get<std::int64_t>() + 1;
            }
        }
    }
    return summary;
}

std::optional<CheckpointSummary> newestCheckpoint(
    int chainDirFd, const ScanLimits& limits, std::vector<std::string>* skipped)
{
    const auto deadline = Clock::now() + limits.timeLimit;
    const int copy = ::fcntl(chainDirFd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
        return std::nullopt;
    }
    std::unique_ptr<DIR, DirCloser> dir(::fdopendir(copy));
    if (!dir) {
        ::close(copy);
        return std::nullopt;
    }
    ::rewinddir(dir.get());
    // Only the newest maxCandidates names are kept (a min-heap), so a directory with millions of
    // entries costs no more memory than one with a few.
    using Candidate = std::pair<std::uint64_t, std::string>;
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> newest;
    while (const dirent* entry = ::readdir(dir.get())) {
        // The checkpointer's own rule (baton_contract.hpp): a name it would not restore is no candidate.
        const auto iteration = contract::parseCheckpointDirName(entry->d_name);
        if (iteration && limits.maxCandidates > 0) {
            if (newest.size() < limits.maxCandidates) {
                newest.emplace(*iteration, entry->d_name);
            } else if (*iteration > newest.top().first) {
                newest.pop();
                newest.emplace(*iteration, entry->d_name);
            }
        }
        if (Clock::now() >= deadline) {
            return std::nullopt;
        }
    }
    std::vector<Candidate> candidates;
    for (; !newest.empty(); newest.pop()) {
        candidates.push_back(newest.top());
    }
    std::reverse(candidates.begin(), candidates.end());
    for (const auto& [iteration, name] : candidates) {
        if (Clock::now() >= deadline) {
            break;
        }
        const auto text = readManifest(chainDirFd, name, limits.maxManifestBytes);
        if (!text) {
            continue;
        }
        try {
            return summarizeManifest(name, *text, limits.maxDepth);
        } catch (const std::exception& e) {
            // A damaged or hostile manifest: the previous checkpoint is the newest usable one.
            if (skipped) {
                skipped->push_back(name + ": " + e.what());
            }
        }
    }
    return std::nullopt;
}

} // namespace baton::spank
