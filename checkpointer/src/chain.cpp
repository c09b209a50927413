#include "baton/ckpt/chain.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <system_error>
#include <thread>
#include <nlohmann/json.hpp>

#include "baton/ckpt/error.hpp"
#include "common/baton_contract.hpp"
#include "io.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;

std::string checkpointDirName(std::uint64_t iteration)
{
    return contract::checkpointDirName(iteration);
}

std::optional<std::uint64_t> parseCheckpointDirName(const std::string& name)
{
    return contract::parseCheckpointDirName(name);
}

std::vector<CheckpointInfo> listCheckpoints(const fs::path& chainDir)
{
    std::vector<CheckpointInfo> found;
    std::error_code ec;
    fs::directory_iterator it(chainDir, ec);
    if (ec)
        throw io::IoError(ec.value(), "cannot list chain directory " + chainDir.string());
    for (const auto& entry : it) {
        auto iteration = parseCheckpointDirName(entry.path().filename().string());
        if (!iteration || !entry.is_directory(ec))
            continue;
        CheckpointInfo info;
        info.dir = entry.path();
        info.iteration = *iteration;
        // Only ENOENT says "no manifest": EIO or ESTALE (NFS) says nothing, and retention must not take
        // such a checkpoint for an interrupted one.
        const fs::path manifest = entry.path() / kManifestName;
        struct stat st { };
        if (::stat(manifest.c_str(), &st) == 0)
            info.committed = S_ISREG(st.st_mode);
        else if (errno != ENOENT)
            info.statError = errno;
        found.push_back(std::move(info));
    }
    std::sort(found.begin(), found.end(),
        [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.iteration < b.iteration; });
    return found;
}

VerifyResult verifyCheckpoint(const fs::path& checkpointDir, bool directIo)
{
    VerifyResult result;
    try {
        result.manifest = parseManifest(io::readSmallFile(checkpointDir / kManifestName));
    } catch (const FormatError&) {
        throw;
    } catch (const Error& e) {
        result.reason = e.what();
        return result;
    }
    result.reason = readAndVerify(checkpointDir, *result.manifest, nullptr, directIo);
    result.ok = result.reason.empty();
    return result;
}

void removeCheckpoint(const fs::path& checkpointDir)
{
    // Renaming first makes the removal atomic: a crash leaves a hidden directory, not a torn checkpoint.
    fs::path doomed = checkpointDir.parent_path()
        / ("." + checkpointDir.filename().string() + ".deleting-" + temporaryOwnerTag());
    io::renameDurably(checkpointDir, doomed);
    std::error_code ec;
    fs::remove_all(doomed, ec);
    if (ec)
        throw io::IoError(ec.value(), "cannot remove " + doomed.string());
}

std::vector<fs::path> pruneChain(const fs::path& chainDir, int keep, const std::set<std::uint64_t>& spare)
{
    if (keep < 1)
        throw ConfigError("keep must be >= 1");
    auto all = listCheckpoints(chainDir);
    std::vector<const CheckpointInfo*> committed;
    for (const auto& info : all) {
        if (info.committed)
            committed.push_back(&info);
    }
    std::vector<fs::path> removed;
    if (committed.empty())
        return removed;
    std::uint64_t newest = committed.back()->iteration;
    std::size_t excess = committed.size() > static_cast<std::size_t>(keep)
        ? committed.size() - static_cast<std::size_t>(keep)
        : 0;
    for (std::size_t i = 0; i < excess; ++i) {
        if (spare.count(committed[i]->iteration) > 0)
            continue;
        removeCheckpoint(committed[i]->dir);
        removed.push_back(committed[i]->dir);
    }
    for (const auto& info : all) {
        if (!info.committed && info.statError == 0 && info.iteration < newest) {
            removeCheckpoint(info.dir);
            removed.push_back(info.dir);
        }
    }
    return removed;
}

namespace {

// The newest committed checkpoint that is final and at least of `minChainSeq`, if any.
std::optional<fs::path> findHandover(const fs::path& chainDir, std::uint64_t minChainSeq)
{
    std::vector<CheckpointInfo> list;
    try {
        list = listCheckpoints(chainDir);
    } catch (const Error&) {
        return std::nullopt; // unreadable for a moment: the next poll tries again
    }
    for (auto it = list.rbegin(); it != list.rend(); ++it) {
        if (!it->committed)
            continue;
        try {
            Manifest manifest = parseManifest(io::readSmallFile(it->dir / kManifestName));
            if (manifest.final && manifest.chainSeq && *manifest.chainSeq >= minChainSeq)
                return it->dir;
        } catch (const Error&) {
            // Torn, removed by retention meanwhile or of a newer format: restore judges it later.
        }
    }
    return std::nullopt;
}

// One of batond's files in a chain directory (the handover's end marker or its request), with its seq:
// read bounded; a missing, torn, oversized or foreign-looking one (another version, no whole seq) is
// none. The files are the chain owner's: anyone who can write them can only stop or hurry their own job.
struct HandoverFileRead {
    nlohmann::json document;
    std::uint64_t seq = 0;
};

std::optional<HandoverFileRead> readHandoverFile(const fs::path& path, std::size_t maxBytes)
{
    std::string text;
    try {
        text = io::readSmallFile(path, maxBytes);
    } catch (const Error&) {
        return std::nullopt; // none, or unreadable for a moment: the next poll looks again
    }
    auto document = nlohmann::json::parse(text, nullptr, false);
    if (!document.is_object() || document.value("version", 0) != 1)
        return std::nullopt;
    const auto seq = document.find("seq");
    if (seq == document.end() || !seq->is_number_unsigned())
        return std::nullopt;
    const std::uint64_t value = seq->get<std::uint64_t>();
    return HandoverFileRead { std::move(document), value };
}

// What batond's end marker says of the predecessor, when it names a seq of at least `minChainSeq`.
std::optional<std::string> predecessorEnded(const fs::path& chainDir, std::uint64_t minChainSeq)
{
    const auto read = readHandoverFile(chainDir / contract::kHandoverEndedFile, contract::kHandoverEndedMaxBytes);
    if (!read || read->seq < minChainSeq)
        return std::nullopt;
    const nlohmann::json& marker = read->document;
    const auto seq = marker.find("seq");
    std::string said = "the job of seq " + std::to_string(seq->get<std::uint64_t>());
    if (const auto job = marker.find("job_id"); job != marker.end() && job->is_number_integer())
        said = "job " + std::to_string(job->get<std::int64_t>()) + " (seq " + std::to_string(seq->get<std::uint64_t>()) + ")";
    if (const auto state = marker.find("state"); state != marker.end() && state->is_string()
        && state->get<std::string>().size() <= 32)
        said += " ended " + state->get<std::string>();
    else
        said += " ended";
    return said;
}

} // namespace

bool handoverRequested(const fs::path& chainDir, std::uint64_t chainSeq, std::optional<std::uint64_t> jobId)
{
    const auto read
        = readHandoverFile(chainDir / contract::kHandoverRequestFile, contract::kHandoverRequestMaxBytes);
    if (!read || read->seq != chainSeq)
        return false;
    // A requeued job keeps its seq and its id; another job of the same seq (a resubmission) has another id.
    const auto job = read->document.find("job_id");
    if (!jobId || job == read->document.end())
        return true;
    return job->is_number_unsigned() && job->get<std::uint64_t>() == *jobId;
}

HandoverWaitResult waitForHandover(
    const fs::path& chainDir, std::uint64_t minChainSeq, double limitSeconds, double pollSeconds)
{
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto limit
        = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limitSeconds));
    const auto poll = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(pollSeconds));
    HandoverWaitResult result;
    for (;;) {
        if (auto found = findHandover(chainDir, minChainSeq)) {
            result.found = true;
            result.checkpoint = *found;
            break;
        }
        if (auto ended = predecessorEnded(chainDir, minChainSeq)) { // after the look for its final checkpoint
            result.predecessorEnded = *ended;
            break;
        }
        const auto now = Clock::now();
        if (now >= limit)
            break;
        std::this_thread::sleep_for(std::min(poll, limit - now));
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return result;
}

std::string temporaryOwnerTag()
{
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
        std::snprintf(host, sizeof host, "localhost");
    std::string tag(host);
    for (char& c : tag) {
        if (c == '/' || c == '.')
            c = '_';
    }
    return tag + "-" + std::to_string(::getpid());
}

// A chain directory may be shared by jobs on several nodes (a successor starts before its predecessor
// ends): a process of this host that is gone owns nothing any more; another host's directories are left
// alone unless they are a day old.
void removeStaleTemporaries(const fs::path& chainDir)
{
    constexpr auto kForeignAge = std::chrono::hours(24);
    std::string ownTag = temporaryOwnerTag();
    std::string ownHost = ownTag.substr(0, ownTag.rfind('-'));
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(chainDir, ec)) {
        std::string name = entry.path().filename().string();
        if (!name.starts_with(".ckpt-"))
            continue;
        std::size_t tagAt = std::string::npos;
        std::size_t markerAt = std::string::npos;
        bool replaced = false;
        for (std::string_view marker : { ".tmp-", ".deleting-", ".replaced-" }) {
            if (auto at = name.find(marker); at != std::string::npos) {
                tagAt = at + marker.size();
                markerAt = at;
                replaced = marker == ".replaced-";
            }
        }
        auto dash = name.rfind('-');
        if (tagAt == std::string::npos || dash == std::string::npos || dash < tagAt)
            continue;
        std::string host = name.substr(tagAt, dash - tagAt);
        std::string pidText = name.substr(dash + 1);
        if (pidText.empty() || pidText.find_first_not_of("0123456789") != std::string::npos
            || pidText.size() > 9)
            continue;
        bool stale;
        if (host == ownHost) {
            auto pid = static_cast<pid_t>(std::stol(pidText));
            stale = pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH);
        } else {
            auto modified = fs::last_write_time(entry.path(), ec);
            stale = !ec && fs::file_time_type::clock::now() - modified > kForeignAge;
        }
        if (!stale)
            continue;
        // A replacement on a file system without rename flags was interrupted after the old checkpoint
        // moved aside: if the new one did not take its name, the old one goes back.
        if (replaced) {
            fs::path final = chainDir / name.substr(1, markerAt - 1);
            struct stat st { };
            if (parseCheckpointDirName(final.filename().string()) && ::lstat(final.c_str(), &st) != 0
                && errno == ENOENT && ::rename(entry.path().c_str(), final.c_str()) == 0) {
                try {
                    io::fsyncDirectory(chainDir);
                } catch (const Error&) {
                    // The rename is done; a later fsync of the directory makes it durable.
                }
                continue;
            }
        }
        fs::remove_all(entry.path(), ec);
    }
}

} // namespace baton::ckpt
