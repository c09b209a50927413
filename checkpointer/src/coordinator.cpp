#include "baton/ckpt/coordinator.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <thread>

#include "io.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;

std::string Coordinator::broadcast(std::string_view key, std::string_view bytes, int root)
{
    if (root < 0 || root >= size())
        throw Error("broadcast root " + std::to_string(root) + " is not a rank of " + std::to_string(size()));
    // Only the root's bytes travel: the others send nothing.
    auto all = allGather(key, rank() == root ? bytes : std::string_view {});
    return std::move(all.at(static_cast<std::size_t>(root)));
}

void Coordinator::barrier(std::string_view key)
{
    allGather(key, {});
}

std::vector<std::string> SoloCoordinator::allGather(std::string_view, std::string_view bytes)
{
    return { std::string(bytes) };
}

namespace {

// Session and operation names become file names: a small safe alphabet, no hidden or relative names.
void checkToken(const char* what, std::string_view token)
{
    const bool ok = !token.empty() && token.size() <= 128 && token.front() != '.'
        && std::all_of(token.begin(), token.end(), [](char c) {
               return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'
                   || c == '_' || c == '-';
           });
    if (!ok)
        throw ConfigError(std::string(what) + " '" + std::string(token)
            + "' must be 1 to 128 characters of A-Z a-z 0-9 . _ - and not start with '.'");
}

std::optional<long> environmentInteger(const char* name, long low, long high)
{
    const char* text = std::getenv(name);
    if (text == nullptr)
        return std::nullopt;
    std::string value(text);
    char* end = nullptr;
    errno = 0;
    long number = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE || number < low || number > high)
        throw ConfigError(std::string(name) + "='" + value + "' is not a whole number from "
            + std::to_string(low) + " to " + std::to_string(high));
    return number;
}

std::optional<std::string> environmentText(const char* name)
{
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0')
        return std::nullopt;
    return std::string(text);
}

} // namespace

FileCoordinator::FileCoordinator(
    fs::path chainDir, std::string session, int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank)
    , size_(size)
    , timeout_(timeout)
{
    checkToken("coordinator session", session);
    if (size < 1 || rank < 0 || rank >= size)
        throw ConfigError("rank " + std::to_string(rank) + " of world size " + std::to_string(size)
            + " is impossible (0 <= rank < size)");
    if (timeout.count() <= 0)
        throw ConfigError("the coordinator's timeout must be positive");
    dir_ = chainDir / kCoordinatorDirName / session;
    io::createDirectories(dir_, 0700);
}

std::unique_ptr<FileCoordinator> FileCoordinator::fromEnvironment(const fs::path& chainDir)
{
    constexpr long kMaxRanks = 1 << 20;
    auto size = environmentInteger("BATON_WORLD_SIZE", 1, kMaxRanks);
    auto rank = environmentInteger("BATON_RANK", 0, kMaxRanks - 1);
    // Slurm's task numbers describe the processes only inside a job step (srun): the batch script sees
    // the allocation's SLURM_NTASKS although it is one process.
    const auto step = environmentText("SLURM_STEP_ID");
    const bool inStep = step && step->find_first_not_of("0123456789") == std::string::npos;
    if (!size && inStep)
        size = environmentInteger("SLURM_NTASKS", 1, kMaxRanks);
    if (!rank && inStep)
        rank = environmentInteger("SLURM_PROCID", 0, kMaxRanks - 1);
    const long worldSize = size.value_or(1);
    const long ownRank = rank.value_or(0);
    if (ownRank >= worldSize)
        throw ConfigError("rank " + std::to_string(ownRank) + " is not below the world size "
            + std::to_string(worldSize) + " (BATON_RANK / BATON_WORLD_SIZE or SLURM_PROCID / SLURM_NTASKS)");
    auto session = environmentText("BATON_COORD_SESSION");
    if (!session) {
        auto job = environmentText("SLURM_JOB_ID");
        if (job && inStep)
            session = *job + "." + *step;
    }
    if (!session) {
        if (worldSize > 1)
            throw ConfigError("a world size of " + std::to_string(worldSize)
                + " needs a coordinator session unique to this launch: set BATON_COORD_SESSION (Slurm's "
                  "SLURM_JOB_ID and SLURM_STEP_ID serve when they are set)");
        return nullptr;
    }
    if (worldSize == 1)
        return nullptr;
    auto timeout = environmentInteger("BATON_COORD_TIMEOUT", 1, 86400).value_or(600);
    return std::make_unique<FileCoordinator>(chainDir, *session, static_cast<int>(ownRank),
        static_cast<int>(worldSize), std::chrono::seconds(timeout));
}

std::vector<std::string> FileCoordinator::allGather(std::string_view key, std::string_view bytes)
{
    checkToken("coordinator operation", key);
    // After a timeout the ranks no longer agree on the order of operations: nothing later can match.
    if (!broken_.empty())
        throw CoordinationError(
            broken_ + " (an earlier collective failed; this launch cannot coordinate again)");
    // Numbered in call order (the same on every rank): a key used again names a new operation.
    const std::string base = std::to_string(operations_++) + "." + std::string(key);
    // Published by rename: a reader sees the whole file or none.
    const fs::path mine = dir_ / (base + "." + std::to_string(rank_));
    const fs::path temporary = dir_ / ("." + base + "." + std::to_string(rank_) + ".tmp");
    {
        io::Fd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (fd.get() < 0)
            io::throwErrno("coordinator: cannot create " + temporary.string());
        std::size_t done = 0;
        while (done < bytes.size()) {
            ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                io::throwErrno("coordinator: cannot write " + temporary.string());
            done += static_cast<std::size_t>(n);
        }
        fd.close(temporary.string());
    }
    if (::rename(temporary.c_str(), mine.c_str()) != 0)
        io::throwErrno("coordinator: cannot publish " + mine.string());

    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + timeout_;
    std::vector<std::string> result(static_cast<std::size_t>(size_));
    std::vector<bool> have(static_cast<std::size_t>(size_), false);
    have[static_cast<std::size_t>(rank_)] = true;
    result[static_cast<std::size_t>(rank_)] = std::string(bytes);
    auto pause = std::chrono::microseconds(200);
    for (;;) {
        int missing = -1;
        for (int r = 0; r < size_; ++r) {
            if (have[static_cast<std::size_t>(r)])
                continue;
            const fs::path theirs = dir_ / (base + "." + std::to_string(r));
            try {
                result[static_cast<std::size_t>(r)] = io::readSmallFile(theirs);
                have[static_cast<std::size_t>(r)] = true;
            } catch (const io::IoError& e) {
                if (e.code() != ENOENT)
                    throw;
                if (missing < 0)
                    missing = r;
            }
        }
        if (missing < 0) {
            // Every rank has published this operation, so each has finished reading the previous one:
            // its files can go.
            if (rank_ == 0 && !previous_.empty()) {
                for (int r = 0; r < size_; ++r)
                    ::unlink((dir_ / (previous_ + "." + std::to_string(r))).c_str());
            }
            previous_ = base;
            return result;
        }
        if (Clock::now() >= deadline) {
            broken_ = "coordinator: rank " + std::to_string(missing) + " of " + std::to_string(size_)
                + " did not reach '" + base + "' within "
                + std::to_string(
                    std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count() / 1000.0)
                + " s (it stopped or is stuck); in " + dir_.string();
            throw CoordinationError(broken_);
        }
        std::this_thread::sleep_for(pause);
        pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
    }
}

void removeStaleCoordinatorSessions(const fs::path& chainDir)
{
    constexpr auto kAge = std::chrono::hours(24);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(chainDir / kCoordinatorDirName, ec)) {
        auto modified = fs::last_write_time(entry.path(), ec);
        if (!ec && fs::file_time_type::clock::now() - modified > kAge)
            fs::remove_all(entry.path(), ec);
    }
}

} // namespace baton::ckpt
