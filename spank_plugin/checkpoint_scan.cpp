#include "checkpoint_scan.hpp"

#include "unique_fd.hpp"

#include <algorithm>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <stdexcept>
#include <sys/stat.h>
#include <vector>

namespace baton::spank {

namespace {

constexpr std::size_t maxManifestBytes = 16u << 20;
constexpr int supportedFormatVersion = 1;

struct DirCloser {
    void operator()(DIR* dir) const { ::closedir(dir); }
};

// Returns the iteration encoded in a `ckpt-<digits>` name, or -1.
long long iterationOf(const std::string& name)
{
    const std::string prefix = "ckpt-";
    if (name.size() <= prefix.size() || name.size() > prefix.size() + 18 || name.rfind(prefix, 0) != 0) {
        return -1;
    }
    long long value = 0;
    for (std::size_t i = prefix.size(); i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') {
            return -1;
        }
        value = value * 10 + (name[i] - '0');
    }
    return value;
}

std::optional<std::string> readManifest(int chainDirFd, const std::string& name)
{
    UniqueFd dir(::openat(chainDirFd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir.valid()) {
        return std::nullopt;
    }
    // O_NONBLOCK: a FIFO named manifest.json must not block the open.
    UniqueFd file(::openat(dir.get(), "manifest.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    struct stat info { };
    if (!file.valid() || ::fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode)
        || static_cast<std::size_t>(info.st_size) > maxManifestBytes) {
        return std::nullopt;
    }
    std::string text;
    char buffer[65536];
    while (text.size() <= maxManifestBytes) {
        const ssize_t got = ::read(file.get(), buffer, sizeof buffer);
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

} // namespace

CheckpointSummary summarizeManifest(const std::string& name, const std::string& manifestText)
{
    const auto manifest = nlohmann::json::parse(manifestText);
    const int version = manifest.at("format_version").get<int>();
    if (version < 1 || version > supportedFormatVersion) {
        throw std::runtime_error("unsupported manifest format_version " + std::to_string(version));
    }
    CheckpointSummary summary;
    summary.name = name;
    summary.iteration = manifest.at("iteration").get<std::int64_t>();
    summary.createdUnix = manifest.at("created_unix").get<double>();
    summary.totalBytes = manifest.at("total_bytes").get<std::int64_t>();
    const auto tuning = manifest.find("tuning");
    if (tuning != manifest.end() && tuning->is_object()) {
        summary.tuning = *tuning;
    }
    return summary;
}

std::optional<CheckpointSummary> newestCheckpoint(int chainDirFd)
{
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
    std::vector<std::pair<long long, std::string>> candidates;
    while (const dirent* entry = ::readdir(dir.get())) {
        const std::string name = entry->d_name;
        const long long iteration = iterationOf(name);
        if (iteration >= 0) {
            candidates.emplace_back(iteration, name);
        }
    }
    std::sort(candidates.rbegin(), candidates.rend());
    for (const auto& [iteration, name] : candidates) {
        const auto text = readManifest(chainDirFd, name);
        if (!text) {
            continue;
        }
        try {
            return summarizeManifest(name, *text);
        } catch (const std::exception&) {
            continue; // a damaged manifest: the previous checkpoint is the newest usable one
        }
    }
    return std::nullopt;
}

} // namespace baton::spank
