#include "drain.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <system_error>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "commit.hpp"
#include "io.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kDrainNice = 10;
// A rank's error in a round whose drain a final checkpoint abandoned: no failure, the next round takes it.
constexpr const char* kAbandoned = "abandoned for a newer checkpoint";

double secondsSince(Clock::time_point start)
{
    return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

Drainer::Drainer(DrainSettings settings)
    : settings_(std::move(settings))
    , committer_(settings_.log)
{
    status_.twoLevel = true;
    thread_ = std::thread([this] { run(); });
}

Drainer::~Drainer()
{
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
}

void Drainer::submit(const fs::path& localCheckpoint, std::uint64_t iteration, bool urgent)
{
    {
        std::lock_guard lock(mutex_);
        const Version version { iteration,
            submitted_ && submitted_->iteration == iteration ? submitted_->generation + 1 : 0 };
        submitted_ = version;
        if (broken_)
            return;
        if (waiting_) {
            ++status_.skipped;
            givenUp_.insert(waiting_->version);
        }
        waiting_ = Work { localCheckpoint, version, Clock::now() };
        if (urgent && current_)
            abandonCurrent_ = true;
    }
    changed_.notify_all();
}

bool Drainer::waitFor(std::uint64_t iteration)
{
    std::unique_lock lock(mutex_);
    const Version wanted = submitted_ && submitted_->iteration == iteration ? *submitted_ : Version { iteration, 0 };
    changed_.wait(lock, [&] { return (shared_ && *shared_ >= wanted) || givenUp_.count(wanted) > 0 || broken_; });
    return shared_ && *shared_ >= wanted;
}

std::set<std::uint64_t> Drainer::needed() const
{
    std::lock_guard lock(mutex_);
    std::set<std::uint64_t> iterations;
    for (const auto* work : { &waiting_, &current_ }) {
        if (*work)
            iterations.insert((*work)->version.iteration);
    }
    return iterations;
}

DrainStatus Drainer::status() const
{
    std::lock_guard lock(mutex_);
    DrainStatus status = status_;
    // Single process: the one waiting, else the one under way. Several ranks: the newest stays waiting
    // while its round runs.
    if (waiting_)
        status.pendingIteration = waiting_->version.iteration;
    else if (current_)
        status.pendingIteration = current_->version.iteration;
    return status;
}

void Drainer::run()
{
    // The drain yields the CPU to training (on a small node they share two cores); a final checkpoint
    // waits for it while training waits too. Linux applies nice to the calling thread alone.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kDrainNice);
    if (settings_.coordinator)
        runRanked();
    else
        runSingle();
}

void Drainer::runSingle()
{
    for (;;) {
        Work work;
        {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, [this] { return stopping_ || waiting_.has_value(); });
            if (!waiting_)
                return; // stopping, nothing left
            work = *std::exchange(waiting_, std::nullopt);
            current_ = work;
            abandonCurrent_ = false;
        }
        bool committed = false;
        bool abandoned = false;
        std::string error;
        for (int attempt = 1; attempt <= settings_.attempts && !committed && !abandoned; ++attempt) {
            try {
                drainOnce(work);
                committed = true;
            } catch (const Abandoned&) {
                abandoned = true;
            } catch (const CorruptSource& e) {
                error = e.what;
                attempt = settings_.attempts; // another attempt would read the same bytes
            } catch (const SharedWriteFailed& e) {
                error = e.what;
            } catch (const std::exception& e) {
                error = e.what();
            }
            if (!committed && !abandoned && attempt < settings_.attempts)
                abandoned = !sleepUnlessAbandoned(countRetry(work.version.iteration, attempt, error));
        }
        if (!error.empty()) {
            std::lock_guard lock(mutex_);
            status_.lastError = error;
        }
        if (committed) {
            pruneShared();
        } else if (!abandoned) {
            settings_.log("drain of iteration " + std::to_string(work.version.iteration)
                + " given up; its node-local copy stays, and the next checkpoint is drained afresh: " + error);
        }
        {
            std::lock_guard lock(mutex_);
            current_.reset();
            if (committed) {
                ++status_.drained;
                shareCommitted(work.version);
                status_.lastDrainSeconds = secondsSince(work.submittedAt);
            } else {
                ++(abandoned ? status_.skipped : status_.failed);
                givenUp_.insert(work.version);
            }
        }
        changed_.notify_all();
    }
}

// With several ranks, rounds in lockstep on every rank: this thread is the only user of the coordinator
// while training goes on, and every decision below follows from values all ranks share (the round's
// outcome, broadcast by rank 0), so that every rank takes part in the same collectives. A round: the ranks
// agree on the newest checkpoint (Version) all of them have committed node-locally, each copies its shard
// into one temporary directory of the chain, and rank 0 writes the manifest naming every shard and
// commits, or nobody does.
void Drainer::runRanked()
{
    try {
        runRounds();
    } catch (const std::exception& e) {
        // A rank that never came (CoordinationError) breaks the coordinator for good: nothing more can
        // commit in the chain from this process; training goes on node-locally.
        settings_.log(std::string("the ranks' drain to the chain directory stopped: ") + e.what());
        std::lock_guard lock(mutex_);
        status_.lastError = e.what();
        broken_ = true;
        if (waiting_)
            givenUp_.insert(waiting_->version);
        waiting_.reset();
        current_.reset();
    }
    changed_.notify_all();
}

void Drainer::runRounds()
{
    int failedRounds = 0;
    for (;;) {
        Work newest;
        {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, [this] { return stopping_ || waiting_.has_value(); });
            if (!waiting_)
                return;
            newest = *waiting_;
        }
        const auto proposals = settings_.coordinator->allGather("drain-next",
            std::to_string(newest.version.iteration) + " " + std::to_string(newest.version.generation));
        Version chosen = newest.version;
        for (const auto& proposal : proposals) {
            const std::size_t space = proposal.find(' ');
            chosen = std::min(chosen,
                Version { std::stoull(proposal.substr(0, space)), std::stoull(proposal.substr(space + 1)) });
        }
        // This rank may be a checkpoint ahead: its copy of `chosen` lies beside its newest one.
        const fs::path local = newest.local.parent_path() / checkpointDirName(chosen.iteration);
        {
            std::lock_guard lock(mutex_);
            current_ = Work { local, chosen, newest.submittedAt };
            abandonCurrent_ = false;
        }
        const std::string outcome = drainRound(chosen.iteration, local);
        // Decided from the outcome that every rank received alike, not from this rank's own view, so
        // that the ranks count the same failures and give up together.
        const bool abandoned = outcome.find(kAbandoned) != std::string::npos;
        double backoff = 0;
        {
            std::lock_guard lock(mutex_);
            current_.reset();
            if (outcome.empty()) {
                failedRounds = 0;
                ++status_.drained;
                shareCommitted(chosen);
                status_.lastDrainSeconds = secondsSince(newest.submittedAt);
                if (waiting_ && waiting_->version <= chosen)
                    waiting_.reset();
            } else if (!abandoned) {
                status_.lastError = outcome;
                if (++failedRounds >= settings_.attempts) {
                    // Given up; the next round waits for a newer checkpoint on this rank.
                    ++status_.failed;
                    givenUp_.insert(chosen);
                    failedRounds = 0;
                    if (waiting_ && waiting_->version <= chosen)
                        waiting_.reset();
                }
            }
        }
        changed_.notify_all();
        if (outcome.empty() && settings_.coordinator->rank() == 0)
            pruneShared();
        if (!outcome.empty() && !abandoned && failedRounds > 0)
            backoff = countRetry(chosen.iteration, failedRounds, outcome);
        if (backoff > 0) {
            // Every rank sleeps alike; an urgent checkpoint does not cut it short here (the ranks would
            // part ways), it is drained in the next round.
            std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
        }
    }
}

std::string Drainer::drainRound(std::uint64_t iteration, const fs::path& local)
{
    const int rank = settings_.coordinator->rank();
    const fs::path temporary
        = settings_.sharedDir / ("." + checkpointDirName(iteration) + ".drain.tmp-" + settings_.leaderTag);
    nlohmann::json record;
    std::string error;
    try {
        record = nlohmann::json::parse(io::readSmallFile(local / kManifestName, 64 << 20));
        const Manifest shard = parseShardDescription(record, record.at("world_size").get<int>());
        if (shard.iteration != iteration || shard.files.front().rank != rank)
            throw Error(local.string() + " is not this rank's shard of iteration " + std::to_string(iteration));
        io::createDirectories(temporary, io::directoryMode(settings_.fileMode));
        std::uint64_t copied = 0;
        copyFile(local, shard, shard.files.front().name, temporary, copied, Clock::now());
    } catch (const Abandoned&) {
        error = kAbandoned;
    } catch (const CorruptSource& e) {
        error = e.what;
    } catch (const SharedWriteFailed& e) {
        error = e.what;
    } catch (const std::exception& e) {
        error = e.what();
    }
    nlohmann::json shard = record.is_object() ? record : nlohmann::json::object();
    shard.erase("manifest"); // rank 0 has its own
    shard["error"] = error;
    const auto shards = settings_.coordinator->allGather("drain-shards", shard.dump());
    std::string outcome;
    if (rank == 0) {
        try {
            if (!record.is_object() || !record.contains("manifest"))
                throw Error(error.empty() ? "rank 0 has no record of the checkpoint's fields" : error);
            const std::string text = shardedManifest(record["manifest"], shards, temporary, iteration);
            committer_.commitWithManifest(temporary, text, settings_.sharedDir / checkpointDirName(iteration),
                settings_.fileMode);
        } catch (const std::exception& e) {
            outcome = e.what();
            if (outcome.empty())
                outcome = "unknown error";
            std::error_code ec;
            fs::remove_all(temporary, ec); // every rank has finished writing into it: the gather was after
        }
    }
    outcome = settings_.coordinator->broadcast("drain-commit", outcome, 0);
    return outcome;
}

// One attempt: streams each data file from the node-local copy into a temporary directory of the chain,
// checking every byte against the manifest's checksums on the way (a node-local copy that rotted is
// never drained), makes the files and then the manifest durable, and commits. Restore verifies it again,
// as it does every checkpoint.
void Drainer::drainOnce(const Work& work)
{
    const std::string manifestText = io::readSmallFile(work.local / kManifestName);
    const Manifest manifest = parseManifest(manifestText);
    if (manifest.iteration != work.version.iteration)
        throw CorruptSource { work.local.string() + ": the manifest says iteration " + std::to_string(manifest.iteration) };
    const std::string name = checkpointDirName(work.version.iteration);
    const fs::path temporary = settings_.sharedDir / ("." + name + ".tmp-" + temporaryOwnerTag());
    std::error_code ec;
    fs::remove_all(temporary, ec);
    try {
        io::createDirectories(temporary, io::directoryMode(settings_.fileMode));
        const auto start = Clock::now();
        std::uint64_t copied = 0;
        for (const auto& file : manifest.files)
            copyFile(work.local, manifest, file.name, temporary, copied, start);
        throwIfAbandoned();
        committer_.commitWithManifest(temporary, manifestText, settings_.sharedDir / name, settings_.fileMode);
    } catch (...) {
        fs::remove_all(temporary, ec);
        throw;
    }
}

void Drainer::copyFile(const fs::path& local, const Manifest& manifest, const std::string& fileName,
    const fs::path& temporary, std::uint64_t& copied, Clock::time_point start)
{
    io::StreamWriter writer(temporary / fileName, settings_.fileMode);
    const std::string reason = readAndVerifyFile(local, manifest, fileName, nullptr, true,
        [&](const std::byte* data, std::uint64_t, std::size_t length) {
            throwIfAbandoned();
            try {
                writer.write(data, length);
            } catch (const io::IoError& e) {
                throw SharedWriteFailed { e.what() }; // not the node-local copy's fault: tried again
            }
            copied += length;
            // The rate bound: never ahead of `bytesPerSecond` since the copy began.
            if (settings_.bytesPerSecond > 0) {
                const double ahead = static_cast<double>(copied) / settings_.bytesPerSecond - secondsSince(start);
                if (ahead > 0 && !sleepUnlessAbandoned(ahead))
                    throw Abandoned();
            }
        });
    if (!reason.empty())
        throw CorruptSource { "the node-local copy " + local.string() + " cannot be drained: " + reason };
    writer.finish();
}

// Counts and logs a failed attempt that will be tried again; returns how long to wait first.
double Drainer::countRetry(std::uint64_t iteration, int failures, const std::string& error)
{
    const double backoff = settings_.firstBackoffSeconds * std::ldexp(1.0, failures - 1);
    {
        std::lock_guard lock(mutex_);
        status_.lastError = error;
        ++status_.retries;
    }
    settings_.log("drain of iteration " + std::to_string(iteration) + " to " + settings_.sharedDir.string()
        + " failed (attempt " + std::to_string(failures) + " of " + std::to_string(settings_.attempts)
        + "), trying again in " + std::to_string(backoff).substr(0, 4) + " s: " + error);
    return backoff;
}

// Under mutex_.
void Drainer::shareCommitted(const Version& version)
{
    shared_ = std::max(shared_.value_or(version), version);
    status_.sharedIteration = shared_->iteration;
}

void Drainer::pruneShared()
{
    try {
        pruneChain(settings_.sharedDir, settings_.keep);
    } catch (const std::exception& e) {
        settings_.log(std::string("warning: retention on the shared level failed: ") + e.what());
    }
}

void Drainer::throwIfAbandoned()
{
    std::lock_guard lock(mutex_);
    if (abandonCurrent_)
        throw Abandoned();
}

// Returns false as soon as the drain under way is abandoned.
bool Drainer::sleepUnlessAbandoned(double seconds)
{
    std::unique_lock lock(mutex_);
    const auto until = Clock::now()
        + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, seconds)));
    return !changed_.wait_until(lock, until, [this] { return abandonCurrent_; });
}

} // namespace baton::ckpt
