#include "drain.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <system_error>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "io.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kDrainNice = 10;

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
        if (waiting_) {
            ++status_.skipped;
            givenUp_.insert(waiting_->iteration);
        }
        waiting_ = Work { localCheckpoint, iteration, Clock::now() };
        status_.pendingIteration = iteration;
        if (urgent && current_)
            abandonCurrent_ = true;
    }
    changed_.notify_all();
}

bool Drainer::waitFor(std::uint64_t iteration)
{
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
        return (status_.sharedIteration && *status_.sharedIteration >= iteration) || givenUp_.count(iteration) > 0;
    });
    return status_.sharedIteration && *status_.sharedIteration >= iteration;
}

std::set<std::uint64_t> Drainer::needed() const
{
    std::lock_guard lock(mutex_);
    std::set<std::uint64_t> iterations;
    for (const auto* work : { &waiting_, &current_ }) {
        if (*work)
            iterations.insert((*work)->iteration);
    }
    return iterations;
}

DrainStatus Drainer::status() const
{
    std::lock_guard lock(mutex_);
    return status_;
}

void Drainer::run()
{
    // The drain yields the CPU to training (on a small node they share two cores); a final checkpoint
    // waits for it while training waits too. Linux applies nice to the calling thread alone.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kDrainNice);
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
            if (!committed && !abandoned && attempt < settings_.attempts) {
                std::lock_guard lock(mutex_);
                status_.lastError = error;
                ++status_.retries;
            }
            if (!committed && !abandoned && attempt < settings_.attempts) {
                const double backoff = settings_.firstBackoffSeconds * std::ldexp(1.0, attempt - 1);
                settings_.log("drain of iteration " + std::to_string(work.iteration) + " to "
                    + settings_.sharedDir.string() + " failed (attempt " + std::to_string(attempt) + " of "
                    + std::to_string(settings_.attempts) + "), trying again in "
                    + std::to_string(backoff).substr(0, 4) + " s: " + error);
                abandoned = !sleepUnlessAbandoned(backoff);
            }
        }
        if (!error.empty()) {
            std::lock_guard lock(mutex_);
            status_.lastError = error;
        }
        if (committed) {
            try {
                pruneChain(settings_.sharedDir, settings_.keep);
            } catch (const std::exception& e) {
                settings_.log(std::string("warning: retention on the shared level failed: ") + e.what());
            }
        } else if (!abandoned) {
            settings_.log("drain of iteration " + std::to_string(work.iteration)
                + " given up; its node-local copy stays, and the next checkpoint is drained afresh: " + error);
        }
        {
            std::lock_guard lock(mutex_);
            current_.reset();
            if (committed) {
                ++status_.drained;
                status_.sharedIteration = std::max(status_.sharedIteration.value_or(0), work.iteration);
                status_.lastDrainSeconds = secondsSince(work.submittedAt);
            } else {
                ++(abandoned ? status_.skipped : status_.failed);
                givenUp_.insert(work.iteration);
            }
            if (!waiting_)
                status_.pendingIteration.reset();
        }
        changed_.notify_all();
    }
}

// One attempt: streams each data file from the node-local copy into a temporary directory of the chain,
// checking every byte against the manifest's checksums on the way (a node-local copy that rotted is
// never drained), makes the files and then the manifest durable, and commits. Restore verifies it again,
// as it does every checkpoint.
void Drainer::drainOnce(const Work& work)
{
    const std::string manifestText = io::readSmallFile(work.local / kManifestName);
    const Manifest manifest = parseManifest(manifestText);
    if (manifest.iteration != work.iteration)
        throw CorruptSource { work.local.string() + ": the manifest says iteration " + std::to_string(manifest.iteration) };
    const std::string name = checkpointDirName(work.iteration);
    const fs::path temporary = settings_.sharedDir / ("." + name + ".tmp-" + temporaryOwnerTag());
    std::error_code ec;
    fs::remove_all(temporary, ec);
    try {
        io::createDirectories(temporary, io::directoryMode(settings_.fileMode));
        const auto start = Clock::now();
        std::uint64_t copied = 0;
        for (const auto& file : manifest.files)
            copyFile(work.local, manifest, file.name, temporary, copied, start);
        io::writeSmallFileDurably(temporary / kManifestName, manifestText, settings_.fileMode);
        io::fsyncDirectory(temporary);
        throwIfAbandoned();
        committer_.commit(temporary, settings_.sharedDir / name);
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
