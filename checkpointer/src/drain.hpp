// The second level of two-level storage: copies checkpoints committed in the node-local directory to
// the chain directory on the shared file system, on a thread of its own at low CPU priority, at a
// bounded rate. Every byte written is checked against the manifest's checksums as it is copied, and the
// copy commits with the manifest-last rule, so the shared level holds only complete, verified
// checkpoints.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/manifest.hpp"
#include "commit.hpp"

namespace baton::ckpt {

struct DrainSettings {
    std::filesystem::path sharedDir; // the chain directory
    int keep = 2; // retention on the shared level
    unsigned fileMode = 0600;
    double bytesPerSecond = 0; // 0: unbounded
    int attempts = 6; // per checkpoint, before it is given up (a newer one is tried afresh)
    double firstBackoffSeconds = 0.5; // doubled after each failed attempt
    std::function<void(const std::string&)> log;
    // Several ranks: each drains its own shard and the chain's commit is collective (rank 0 writes the
    // manifest). `leaderTag` (rank 0's temporaryOwnerTag) names the shared temporary directory.
    std::shared_ptr<Coordinator> coordinator;
    std::string leaderTag;
};

class Drainer {
public:
    explicit Drainer(DrainSettings settings);
    // Lets the drain under way finish (or give up), then stops. Call waitFor() first to be sure of it.
    ~Drainer();
    Drainer(const Drainer&) = delete;
    Drainer& operator=(const Drainer&) = delete;

    // Drains the committed node-local checkpoint `localCheckpoint` of `iteration` next. It replaces one
    // still waiting (only the newest matters: the older is counted as skipped); `urgent` (a final
    // checkpoint) also abandons a drain under way, so that the last one does not queue behind it.
    // The same iteration again (a final checkpoint of the newest checkpoint's iteration, as
    // Session::finish() commits for `training_done`) is a newer version of it, drained in its turn.
    void submit(const std::filesystem::path& localCheckpoint, std::uint64_t iteration, bool urgent);
    // Waits until the newest submitted version of `iteration` (or a newer checkpoint) has committed on
    // the shared level (true), or its drain gave up or was replaced by a newer one (false).
    bool waitFor(std::uint64_t iteration);
    // The iterations whose node-local copies the drain still needs: local retention keeps them.
    std::set<std::uint64_t> needed() const;
    DrainStatus status() const;

private:
    // A node-local commit as the drain orders them: `generation` counts the earlier commits of the same
    // iteration in this process. Every rank commits the same sequence, so ranks agree on versions.
    struct Version {
        std::uint64_t iteration = 0;
        std::uint64_t generation = 0;
        auto operator<=>(const Version&) const = default;
    };
    struct Work {
        std::filesystem::path local;
        Version version;
        std::chrono::steady_clock::time_point submittedAt;
    };
    class Abandoned { }; // a final checkpoint replaced the one being drained
    struct CorruptSource { // the node-local copy does not verify: no attempt can drain it
        std::string what;
    };
    struct SharedWriteFailed { // writing into the chain directory failed: worth another attempt
        std::string what;
    };

    void run();
    void runSingle();
    void runRanked();
    void runRounds();
    // One collective round of runRanked(): returns the chain's outcome, empty when it committed.
    std::string drainRound(std::uint64_t iteration, const std::filesystem::path& local);
    void drainOnce(const Work& work);
    void copyFile(const std::filesystem::path& local, const Manifest& manifest, const std::string& fileName,
        const std::filesystem::path& temporary, std::uint64_t& copied, std::chrono::steady_clock::time_point start);
    double countRetry(std::uint64_t iteration, int failures, const std::string& error);
    void shareCommitted(const Version& version);
    void pruneShared();
    void throwIfAbandoned();
    bool sleepUnlessAbandoned(double seconds);

    DrainSettings settings_;
    DirectoryCommitter committer_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::optional<Work> waiting_;
    std::optional<Work> current_;
    std::optional<Version> submitted_; // the newest submit()
    std::optional<Version> shared_; // the newest committed on the shared level
    bool abandonCurrent_ = false;
    bool stopping_ = false;
    bool broken_ = false; // several ranks: the coordinator failed, nothing more is drained
    DrainStatus status_; // its pendingIteration is derived from waiting_ and current_ in status()
    std::set<Version> givenUp_; // versions that waitFor() must not wait for any longer
    std::thread thread_;
};

} // namespace baton::ckpt
