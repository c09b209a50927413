#include "baton/ckpt/checkpointer.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "baton_version.h"
#include "device_backend.hpp"
#include "io.hpp"
#include "thread_pool.hpp"
#include "verify.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kPoolGranule = 2 << 20; // staging grows in these steps

const std::vector<std::string> kReservedFields = { "format_version", "iteration", "epoch", "created_unix",
    "total_bytes", "regions", "blobs", "timings", "files", "library_version", "manifest_checksum", "job_id",
    "restart_count", "final", "training_done" };

double seconds(Clock::duration d)
{
    return std::chrono::duration<double>(d).count();
}

double unixNow()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct RegionSpec {
    void* data = nullptr;
    std::size_t size = 0;
    int device = -1;
    void* stream = nullptr;
};

struct Piece {
    std::byte* to;
    const std::byte* from;
    std::size_t size;
};

// Splits copies into one task per thread of about equal size (measured fastest: each thread streams one
// long range); small regions share a task.
std::vector<std::vector<Piece>> makeCopyTasks(const std::vector<Piece>& copies, unsigned threads)
{
    std::size_t total = 0;
    for (const auto& c : copies)
        total += c.size;
    std::size_t share = std::max<std::size_t>(total / threads + 1, 1 << 20);
    std::vector<std::vector<Piece>> tasks;
    std::vector<Piece> current;
    std::size_t currentBytes = 0;
    for (const auto& c : copies) {
        for (std::size_t at = 0; at < c.size || (c.size == 0 && at == 0); at += share) {
            std::size_t n = std::min(share, c.size - at);
            current.push_back({ c.to + at, c.from + at, n });
            currentBytes += n;
            if (currentBytes >= share) {
                tasks.push_back(std::move(current));
                current.clear();
                currentBytes = 0;
            }
            if (c.size == 0)
                break;
        }
    }
    if (!current.empty())
        tasks.push_back(std::move(current));
    return tasks;
}

void copyPieces(const std::vector<Piece>& pieces)
{
    for (const auto& p : pieces) {
        if (p.size > 0)
            std::memcpy(p.to, p.from, p.size);
    }
}

struct Job {
    std::uint64_t iteration = 0;
    std::uint64_t epoch = 0;
    std::vector<ManifestEntry> regions;
    std::vector<ManifestEntry> blobs;
    std::uint64_t totalBytes = 0;
    std::map<std::string, nlohmann::json> fields;
    Clock::time_point requestedAt;
    bool hasDeviceCopies = false;
    CheckpointFlags flags;
};

// Length in bytes of the UTF-8 sequence at text[at] (strict: no overlong forms, no surrogates, nothing
// above U+10FFFF), or 0 if it is not one.
std::size_t utf8SequenceLength(std::string_view text, std::size_t at)
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(at);
    if (lead < 0x80)
        return 1;
    std::size_t length;
    unsigned char low = 0x80, high = 0xbf; // the allowed range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        if (lead == 0xe0)
            low = 0xa0; // overlong
        else if (lead == 0xed)
            high = 0x9f; // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        if (lead == 0xf0)
            low = 0x90; // overlong
        else if (lead == 0xf4)
            high = 0x8f; // above U+10FFFF
    } else {
        return 0;
    }
    if (at + length > text.size() || byte(at + 1) < low || byte(at + 1) > high)
        return 0;
    for (std::size_t i = 2; i < length; ++i) {
        if (byte(at + i) < 0x80 || byte(at + i) > 0xbf)
            return 0;
    }
    return length;
}

constexpr std::size_t kMaxNameBytes = 1024;

// Names go into the manifest (JSON, which must be UTF-8) and may name files in tools: a name that would
// make every later checkpoint fail is refused when it is given.
void validateName(const char* kind, const std::string& name)
{
    auto refuse = [&](const std::string& why) {
        std::string shown;
        for (unsigned char c : name.substr(0, 64)) {
            if (c >= 0x20 && c < 0x7f) {
                shown += static_cast<char>(c);
            } else {
                char escaped[8];
                std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
                shown += escaped;
            }
        }
        throw Error(std::string(kind) + " name '" + shown + (name.size() > 64 ? "...'" : "'") + " " + why);
    };
    if (name.empty())
        refuse("is empty: a " + std::string(kind) + " needs a name");
    if (name.size() > kMaxNameBytes)
        refuse("is longer than " + std::to_string(kMaxNameBytes) + " bytes");
    // '/' separates the levels of a hierarchical name ("model/layer.0.weight", as baton.torch names its
    // tensors); a name read as a relative path must still stay below where it is put.
    if (name.front() == '/' || name.back() == '/')
        refuse("starts or ends with '/'");
    for (std::size_t begin = 0; begin <= name.size();) {
        std::size_t end = std::min(name.find('/', begin), name.size());
        std::string_view component(name.data() + begin, end - begin);
        if (component.empty() || component == "." || component == "..")
            refuse("has an empty, '.' or '..' path component");
        begin = end + 1;
    }
    for (std::size_t at = 0; at < name.size();) {
        const char c = name[at];
        if (c == '\0')
            refuse("contains a NUL byte");
        if (c == '\\')
            refuse("contains a path separator '\\'");
        const std::size_t length = utf8SequenceLength(name, at);
        if (length == 0)
            refuse("is not valid UTF-8 (byte " + std::to_string(at) + ")");
        at += length;
    }
}

nlohmann::json optionalNumber(const std::optional<std::uint64_t>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

} // namespace

struct Checkpointer::Impl {
    explicit Impl(Options opts)
        : options(std::move(opts))
        , backend(makeDeviceBackend())
        , pool(options.copyThreads != 0 ? options.copyThreads
                                        : std::clamp(std::thread::hardware_concurrency(), 1u, 4u))
    { }

    void log(const std::string& message) const
    {
        if (options.log)
            options.log(message);
        else
            std::cerr << "baton-ckpt: " << message << std::endl;
    }

    // Caller holds the mutex and no checkpoint is in flight.
    void ensureStaging(std::size_t bytes)
    {
        bytes = io::roundUp(std::max<std::size_t>(bytes, 1), kPoolGranule);
        if (bytes <= stagingCapacity)
            return;
        if (staging != nullptr)
            backend->freeStaging(staging, stagingCapacity);
        staging = nullptr;
        stagingCapacity = 0;
        staging = backend->allocateStaging(bytes);
        stagingCapacity = bytes;
    }

    void waitSnapshotLocked(std::unique_lock<std::mutex>& lock)
    {
        changed.wait(lock, [this] { return copiesRemaining == 0 && !(deviceCopiesPending && inFlight); });
    }

    void startLocked(std::uint64_t iteration, CheckpointFlags flags);
    void waitForHandoverOnce(RestoreResult& result);
    void persistLoop();
    void persist(Job& job);
    void commit(Job& job, double snapshotSeconds, Clock::time_point persistStart);
    void commitDirectory(const fs::path& temporary, const fs::path& final);
    void commitWithPlainRename(const fs::path& temporary, const fs::path& final);

    Options options;
    std::unique_ptr<DeviceBackend> backend;
    ThreadPool pool;
    std::byte* staging = nullptr;
    std::size_t stagingCapacity = 0;

    mutable std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, RegionSpec> regions;
    std::map<std::string, std::vector<std::byte>> blobs;
    std::map<std::string, nlohmann::json> fields;
    std::uint64_t epoch = 0;
    bool deviceSnapshot = false;
    bool scheduled = false;

    bool inFlight = false;
    std::size_t copiesRemaining = 0;
    Clock::time_point snapshotStartedAt;
    Clock::time_point snapshotDoneAt;
    bool deviceCopiesPending = false;
    std::vector<DeviceCopy> streamsToOrder;
    std::optional<Job> queued;
    bool stopping = false;

    CheckpointStats stats;
    Counters counters;
    std::string lastError;
    bool lastCommitted = true;
    bool handoverChecked = false; // restore() waits for a handover only the first time
    bool renameFlagsRefused = false; // the chain's file system answered EINVAL to renameat2 flags

    std::thread persister;
};

void Checkpointer::Impl::startLocked(std::uint64_t iteration, CheckpointFlags flags)
{
    Job job;
    job.iteration = iteration;
    job.flags = flags;
    job.epoch = epoch;
    job.fields = fields;
    job.requestedAt = Clock::now();

    std::uint64_t offset = 0;
    auto place = [&](const std::string& name, std::size_t size, int device) {
        offset = io::roundUp(offset, kEntryAlignment);
        ManifestEntry entry { name, kDataFileName, offset, size, 0, device };
        offset += size;
        return entry;
    };
    for (const auto& [name, spec] : regions)
        job.regions.push_back(place(name, spec.size, spec.device));
    for (const auto& [name, bytes] : blobs)
        job.blobs.push_back(place(name, bytes.size(), -1));
    job.totalBytes = offset;

    ensureStaging(io::roundUp(job.totalBytes, io::kDirectAlignment));
    // Padding must be zero on disk: the reader checks it, so that no byte of a data file goes unchecked.
    std::uint64_t end = 0;
    auto zeroGapBefore = [&](const ManifestEntry& e) {
        std::memset(staging + end, 0, e.offset - end);
        end = e.offset + e.size;
    };
    std::vector<Piece> hostCopies;
    std::vector<DeviceCopy> deviceCopies;
    for (const auto& entry : job.regions) {
        zeroGapBefore(entry);
        const auto& spec = regions.at(entry.name);
        if (spec.device < 0)
            hostCopies.push_back(
                { staging + entry.offset, static_cast<const std::byte*>(spec.data), spec.size });
        else
            deviceCopies.push_back(
                { staging + entry.offset, spec.data, spec.size, spec.device, spec.stream });
    }
    for (const auto& entry : job.blobs) {
        zeroGapBefore(entry);
        const auto& bytes = blobs.at(entry.name);
        if (!bytes.empty())
            std::memcpy(staging + entry.offset, bytes.data(), bytes.size());
    }

    backend->beginSnapshot(deviceCopies, deviceSnapshot);
    job.hasDeviceCopies = !deviceCopies.empty();
    deviceCopiesPending = job.hasDeviceCopies;
    streamsToOrder = std::move(deviceCopies);

    auto tasks = makeCopyTasks(hostCopies, pool.size());
    copiesRemaining = tasks.size();
    snapshotDoneAt = job.requestedAt;
    snapshotStartedAt = job.requestedAt;
    inFlight = true;
    ++counters.requested;
    stats = CheckpointStats {};
    stats.iteration = iteration;
    stats.bytes = job.totalBytes;
    stats.final = flags.final;
    stats.trainingDone = flags.trainingDone;
    for (auto& task : tasks) {
        pool.post([this, task = std::move(task)] {
            copyPieces(task);
            std::lock_guard lock(mutex);
            if (--copiesRemaining == 0) {
                snapshotDoneAt = Clock::now();
                // Known as soon as beforeUpdate() returns, not only after the persist.
                stats.snapshotSeconds = seconds(snapshotDoneAt - snapshotStartedAt);
                changed.notify_all();
            }
        });
    }
    queued = std::move(job);
    changed.notify_all();
}

void Checkpointer::Impl::persistLoop()
{
    for (;;) {
        Job job;
        {
            std::unique_lock lock(mutex);
            changed.wait(lock, [this] { return stopping || queued.has_value(); });
            if (!queued)
                return;
            job = std::move(*queued);
            queued.reset();
        }
        persist(job);
    }
}

void Checkpointer::Impl::persist(Job& job)
{
    std::string error;
    double snapshotSeconds = 0;
    Clock::time_point persistStart = Clock::now();
    try {
        {
            std::unique_lock lock(mutex);
            changed.wait(lock, [this] { return copiesRemaining == 0; });
        }
        if (job.hasDeviceCopies)
            backend->finishSnapshot();
        {
            std::lock_guard lock(mutex);
            if (job.hasDeviceCopies) {
                snapshotDoneAt = Clock::now();
                deviceCopiesPending = false;
            }
            snapshotSeconds = seconds(snapshotDoneAt - job.requestedAt);
            stats.snapshotSeconds = snapshotSeconds;
        }
        changed.notify_all();
        persistStart = Clock::now();
        commit(job, snapshotSeconds, persistStart);
    } catch (const std::exception& e) {
        error = e.what();
    }
    double persistSeconds = seconds(Clock::now() - persistStart);

    if (error.empty()) {
        try {
            pruneChain(options.chainDir, options.keep);
        } catch (const std::exception& e) {
            log(std::string("warning: retention failed (the new checkpoint is committed): ") + e.what());
        }
    } else {
        std::error_code ec;
        fs::remove_all(
            options.chainDir / ("." + checkpointDirName(job.iteration) + ".tmp-" + temporaryOwnerTag()), ec);
        log("checkpoint of iteration " + std::to_string(job.iteration)
            + " failed, training continues and the previous checkpoint stays valid: " + error);
    }

    std::lock_guard lock(mutex);
    stats.persistSeconds = persistSeconds;
    stats.finished = true;
    stats.committed = error.empty();
    stats.error = error;
    lastError = error;
    lastCommitted = error.empty();
    ++(error.empty() ? counters.committed : counters.failed);
    deviceCopiesPending = false;
    inFlight = false;
    changed.notify_all();
}

void Checkpointer::Impl::commit(Job& job, double snapshotSeconds, Clock::time_point persistStart)
{

    const fs::path& chain = options.chainDir;
    std::string name = checkpointDirName(job.iteration);
    fs::path temporary = chain / ("." + name + ".tmp-" + temporaryOwnerTag());
    std::error_code ec;
    fs::remove_all(temporary, ec);
    if (::mkdir(temporary.c_str(), static_cast<mode_t>(io::directoryMode(options.fileMode))) != 0)
        io::throwErrno("cannot create " + temporary.string());

    {
        // Checksums are computed on the (otherwise idle) copy threads while the data goes to the device.
        std::vector<ManifestEntry*> small; // declared first: outlives the tasks that read it
        TaskGroup hashing(pool);
        for (auto* list : { &job.regions, &job.blobs }) {
            for (auto& entry : *list) {
                if (entry.size >= (1 << 20))
                    hashing.post(
                        [this, &entry] { entry.checksum = checksum(staging + entry.offset, entry.size); });
                else
                    small.push_back(&entry);
            }
        }
        hashing.post([this, &small] {
            for (auto* entry : small)
                entry->checksum = checksum(staging + entry->offset, entry->size);
        });
        io::writeFileDurably(
            temporary / kDataFileName, staging, job.totalBytes, options.directIo, options.fileMode);
        hashing.wait();
    }

    nlohmann::json document = nlohmann::json::object();
    for (const auto& [key, value] : job.fields)
        document[key] = value;
    if (!document.contains("sampler"))
        document["sampler"] = nullptr;
    if (!document.contains("tuning"))
        document["tuning"] = nlohmann::json::object();
    document["format_version"] = kFormatVersion;
    document["iteration"] = job.iteration;
    document["epoch"] = job.epoch;
    document["total_bytes"] = job.totalBytes;
    document["regions"] = entriesToJson(job.regions);
    document["blobs"] = entriesToJson(job.blobs);
    document["files"] = nlohmann::json::array({ { { "name", kDataFileName }, { "size", job.totalBytes } } });
    document["library_version"] = BATON_VERSION;
    document["job_id"] = optionalNumber(options.jobId);
    document["restart_count"] = optionalNumber(options.restartCount);
    document["final"] = job.flags.final;
    document["training_done"] = job.flags.trainingDone;
    document["timings"] = { { "snapshot_seconds", snapshotSeconds },
        { "persist_seconds", seconds(Clock::now() - persistStart) } };
    document["created_unix"] = unixNow();

    io::writeSmallFileDurably(temporary / "manifest.json.tmp", renderManifest(document), options.fileMode);
    io::renameDurably(temporary / "manifest.json.tmp", temporary / kManifestName);

    // The commit point: the complete directory appears under its final name in one rename.
    commitDirectory(temporary, chain / name);
}

// renameat2 with RENAME_NOREPLACE, then RENAME_EXCHANGE for a checkpoint of the same iteration. NFS (and
// FUSE without rename2) refuse any rename flags with EINVAL: then plain rename(2) does the same job, and
// the Checkpointer stops trying the flags.
void Checkpointer::Impl::commitDirectory(const fs::path& temporary, const fs::path& final)
{
    const fs::path chain = final.parent_path();
    if (!renameFlagsRefused) {
        if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, final.c_str(), RENAME_NOREPLACE) == 0) {
            io::fsyncDirectory(chain);
            return;
        }
        if (errno == EEXIST || errno == ENOTEMPTY) {
            // An earlier checkpoint of the same iteration: swap atomically, then drop the old one.
            if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, final.c_str(), RENAME_EXCHANGE) == 0) {
                io::fsyncDirectory(chain);
                std::error_code ec;
                fs::remove_all(temporary, ec);
                return;
            }
        }
        if (errno != EINVAL && errno != ENOSYS)
            io::throwErrno("cannot commit " + final.string());
        renameFlagsRefused = true;
        log("the file system of " + chain.string()
            + " refuses rename flags (as NFS does): committing with plain rename(2)");
    }
    commitWithPlainRename(temporary, final);
}

// rename(2) of a directory never replaces a non-empty one (EEXIST / ENOTEMPTY), so a fresh name commits
// exactly as RENAME_NOREPLACE does. Replacing a checkpoint of the same iteration takes two renames: the
// old one moves aside to ".ckpt-N.replaced-<host>-<pid>" first. A crash between them leaves no ckpt-N;
// removeStaleTemporaries() then moves the old checkpoint back, so a committed iteration never vanishes.
void Checkpointer::Impl::commitWithPlainRename(const fs::path& temporary, const fs::path& final)
{
    const fs::path chain = final.parent_path();
    if (::rename(temporary.c_str(), final.c_str()) == 0) {
        io::fsyncDirectory(chain);
        return;
    }
    if (errno != EEXIST && errno != ENOTEMPTY)
        io::throwErrno("cannot commit " + final.string());
    const fs::path aside = chain / ("." + final.filename().string() + ".replaced-" + temporaryOwnerTag());
    std::error_code ec;
    fs::remove_all(aside, ec);
    io::renameDurably(final, aside);
    if (::rename(temporary.c_str(), final.c_str()) != 0) {
        const int error = errno;
        if (::rename(aside.c_str(), final.c_str()) == 0)
            io::fsyncDirectory(chain);
        throw io::IoError(error, "cannot commit " + final.string());
    }
    io::fsyncDirectory(chain);
    fs::remove_all(aside, ec);
}

Checkpointer::Checkpointer(Options options)
{
    options.validate();
    std::error_code ec;
    io::createDirectories(options.chainDir, io::directoryMode(options.fileMode));
    if (!fs::is_directory(options.chainDir, ec))
        throw Error("chain directory " + options.chainDir.string() + " is not a directory");
    removeStaleTemporaries(options.chainDir);
    options.identifyFromEnvironment();
    impl_ = std::make_unique<Impl>(std::move(options));
    if (impl_->options.stagingBytes > 0)
        impl_->ensureStaging(impl_->options.stagingBytes);
    impl_->persister = std::thread([impl = impl_.get()] { impl->persistLoop(); });
}

Checkpointer::~Checkpointer()
{
    {
        std::unique_lock lock(impl_->mutex);
        impl_->changed.wait(lock, [this] { return !impl_->inFlight; });
        impl_->stopping = true;
    }
    impl_->changed.notify_all();
    impl_->persister.join();
    if (impl_->staging != nullptr)
        impl_->backend->freeStaging(impl_->staging, impl_->stagingCapacity);
}

void Checkpointer::registerRegion(const std::string& name, void* data, std::size_t size)
{
    validateName("region", name);
    if (data == nullptr && size > 0)
        throw Error("region '" + name + "': null pointer with a non-zero size");
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock); // the in-flight snapshot may still read the old address
    impl_->regions[name] = RegionSpec { data, size, -1, nullptr };
}

void Checkpointer::registerDeviceRegion(
    const std::string& name, void* devicePtr, std::size_t size, int device, void* stream)
{
    validateName("region", name);
    if (device < 0)
        throw Error("region '" + name + "': device must be >= 0");
    impl_->backend->checkDeviceRegion(devicePtr, size, device);
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock);
    impl_->regions[name] = RegionSpec { devicePtr, size, device, stream };
}

void Checkpointer::unregisterRegion(const std::string& name)
{
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock);
    impl_->regions.erase(name);
}

void Checkpointer::setBlob(const std::string& name, std::span<const std::byte> bytes)
{
    validateName("blob", name);
    std::lock_guard lock(impl_->mutex);
    impl_->blobs[name].assign(bytes.begin(), bytes.end());
}

void Checkpointer::setBlob(const std::string& name, std::string_view bytes)
{
    setBlob(name, std::as_bytes(std::span(bytes.data(), bytes.size())));
}

void Checkpointer::removeBlob(const std::string& name)
{
    std::lock_guard lock(impl_->mutex);
    impl_->blobs.erase(name);
}

void Checkpointer::setEpoch(std::uint64_t epoch)
{
    std::lock_guard lock(impl_->mutex);
    impl_->epoch = epoch;
}

void Checkpointer::setManifestField(const std::string& key, nlohmann::json value)
{
    validateName("manifest field", key);
    if (std::find(kReservedFields.begin(), kReservedFields.end(), key) != kReservedFields.end())
        throw Error("manifest field '" + key + "' is reserved by the format");
    try {
        (void)value.dump(); // throws for a string that is not UTF-8: refused now, not at every commit
    } catch (const nlohmann::json::exception& e) {
        throw Error("manifest field '" + key + "': its value cannot be written as JSON: " + e.what());
    }
    std::lock_guard lock(impl_->mutex);
    impl_->fields[key] = std::move(value);
}

void Checkpointer::setDeviceSnapshot(bool onDevice)
{
    std::lock_guard lock(impl_->mutex);
    impl_->deviceSnapshot = onDevice;
}

void Checkpointer::afterUpdate(std::uint64_t iteration)
{
    bool start = false;
    {
        std::lock_guard lock(impl_->mutex);
        start = std::exchange(impl_->scheduled, false);
    }
    if (start)
        requestCheckpoint(iteration);
}

void Checkpointer::beforeUpdate()
{
    auto begin = Clock::now();
    std::unique_lock lock(impl_->mutex);
    bool waited = impl_->copiesRemaining > 0;
    impl_->changed.wait(lock, [this] { return impl_->copiesRemaining == 0; });
    if (!impl_->streamsToOrder.empty()) {
        impl_->backend->orderAfterSnapshot(impl_->streamsToOrder);
        impl_->streamsToOrder.clear();
    }
    if (waited)
        impl_->stats.stallSeconds += seconds(Clock::now() - begin);
}

bool Checkpointer::requestCheckpoint(std::uint64_t iteration, CheckpointFlags flags)
{
    std::unique_lock lock(impl_->mutex);
    if (impl_->inFlight) {
        ++impl_->counters.droppedRequests;
        lock.unlock();
        impl_->log("checkpoint request for iteration " + std::to_string(iteration)
            + " dropped: the previous checkpoint is still in flight");
        return false;
    }
    try {
        impl_->startLocked(iteration, flags);
    } catch (const std::exception& e) {
        ++impl_->counters.failed;
        impl_->lastError = e.what();
        impl_->lastCommitted = false;
        lock.unlock();
        impl_->log("checkpoint of iteration " + std::to_string(iteration) + " could not start: " + e.what());
        return false;
    }
    return true;
}

void Checkpointer::scheduleCheckpoint()
{
    std::lock_guard lock(impl_->mutex);
    impl_->scheduled = true;
}

bool Checkpointer::checkpointNow(std::uint64_t iteration, CheckpointFlags flags)
{
    wait();
    if (!requestCheckpoint(iteration, flags))
        return false;
    return wait();
}

bool Checkpointer::wait()
{
    std::unique_lock lock(impl_->mutex);
    impl_->changed.wait(lock, [this] { return !impl_->inFlight; });
    return impl_->lastCommitted;
}

bool Checkpointer::inFlight() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->inFlight;
}

// A successor may start while its predecessor still writes the handover checkpoint: restoring the
// newest checkpoint before that one commits would resume from stale state.
void Checkpointer::Impl::waitForHandoverOnce(RestoreResult& result)
{
    if (std::exchange(handoverChecked, true) || options.handoverWaitSeconds <= 0 || !options.restartCount
        || *options.restartCount == 0)
        return;
    const std::uint64_t previous = *options.restartCount - 1;
    log("handover: waiting up to " + std::to_string(static_cast<long long>(options.handoverWaitSeconds))
        + " s for a final checkpoint of restart " + std::to_string(previous) + " or later");
    const HandoverWaitResult wait = waitForHandover(options.chainDir, previous, options.handoverWaitSeconds);
    result.handoverWaitSeconds = wait.seconds;
    result.handoverTimedOut = !wait.found;
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.1f", wait.seconds);
    if (wait.found)
        log("handover: " + wait.checkpoint.filename().string() + " is final, found after " + waited + " s");
    else
        log(std::string("handover: no final checkpoint of restart ") + std::to_string(previous) + " after "
            + waited + " s, restoring the newest verified checkpoint");
}

RestoreResult Checkpointer::restore()
{
    wait();
    RestoreResult result;
    impl_->waitForHandoverOnce(result);
    std::unique_lock lock(impl_->mutex);
    auto checkpoints = listCheckpoints(impl_->options.chainDir);
    for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
        auto skip = [&](const std::string& reason) {
            impl_->log("skipping " + it->dir.string() + ": " + reason);
            result.fallbacks.push_back({ it->dir, reason });
        };
        if (it->statError != 0) {
            skip(io::IoError(it->statError, "cannot examine " + (it->dir / kManifestName).string()).what());
            continue;
        }
        if (!it->committed) {
            skip("not committed (no manifest.json): an interrupted checkpoint");
            continue;
        }
        Manifest manifest;
        try {
            manifest = parseManifest(io::readSmallFile(it->dir / kManifestName));
        } catch (const FormatError&) {
            throw;
        } catch (const Error& e) {
            skip(e.what());
            continue;
        }
        if (manifest.iteration != it->iteration) {
            skip(
                "manifest iteration " + std::to_string(manifest.iteration) + " does not match the directory");
            continue;
        }
        // The staging pool is sized by the manifest only after the manifest's layout matched the data file
        // on disk: an absurd total_bytes never turns into an allocation.
        if (std::string reason = checkLayout(it->dir, manifest); !reason.empty()) {
            skip(reason);
            continue;
        }
        for (const auto& entry : manifest.regions) {
            auto found = impl_->regions.find(entry.name);
            if (found != impl_->regions.end() && found->second.size != entry.size)
                throw Error("region '" + entry.name + "' has " + std::to_string(entry.size) + " bytes in "
                    + it->dir.string() + " but " + std::to_string(found->second.size)
                    + " bytes are registered");
        }
        impl_->ensureStaging(io::roundUp(manifest.totalBytes, io::kDirectAlignment));
        // The whole file goes into the staging pool and is verified there (reading runs ahead of
        // checking); only a checkpoint that verified reaches the registered regions, so a failed restore
        // leaves them exactly as they were.
        std::string reason = readAndVerify(it->dir, manifest, impl_->staging, impl_->options.directIo);
        if (!reason.empty()) {
            skip(reason);
            continue;
        }
        std::vector<Piece> hostCopies;
        for (const auto& entry : manifest.regions) {
            auto found = impl_->regions.find(entry.name);
            if (found != impl_->regions.end() && found->second.device < 0 && entry.size > 0)
                hostCopies.push_back({ static_cast<std::byte*>(found->second.data),
                    impl_->staging + entry.offset, entry.size });
        }
        // The copy is the one step that cannot overlap the read: it runs on every pool thread and on this
        // one, after this thread has started the device copies.
        TaskGroup copies(impl_->pool);
        auto tasks = makeCopyTasks(hostCopies, impl_->pool.size() + 1);
        std::vector<Piece> own;
        if (tasks.size() > 1) {
            own = std::move(tasks.back());
            tasks.pop_back();
        }
        for (auto& task : tasks)
            copies.post([task = std::move(task)] { copyPieces(task); });
        for (const auto& entry : manifest.regions) {
            auto found = impl_->regions.find(entry.name);
            if (found == impl_->regions.end()) {
                result.unclaimedRegions.push_back(entry.name);
                continue;
            }
            const auto& spec = found->second;
            if (spec.device >= 0)
                impl_->backend->restoreToDevice(
                    { impl_->staging + entry.offset, spec.data, entry.size, spec.device, spec.stream });
        }

        copyPieces(own);
        copies.wait();

        for (const auto& entry : manifest.blobs) {
            const std::byte* from = impl_->staging + entry.offset;
            result.blobs[entry.name].assign(from, from + entry.size);
        }
        result.restored = true;
        result.iteration = manifest.iteration;
        result.epoch = manifest.epoch;
        result.dir = it->dir;
        result.jobId = manifest.jobId;
        result.restartCount = manifest.restartCount;
        result.final = manifest.final;
        result.trainingDone = manifest.trainingDone;
        result.manifest = std::move(manifest.document);
        impl_->epoch = result.epoch;
        return result;
    }
    return result;
}

CheckpointStats Checkpointer::lastCheckpoint() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->stats;
}

Counters Checkpointer::counters() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->counters;
}

std::string Checkpointer::lastError() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->lastError;
}

const Options& Checkpointer::options() const
{
    return impl_->options;
}

bool Checkpointer::deviceAvailable() const
{
    return impl_->backend->usable();
}

} // namespace baton::ckpt
