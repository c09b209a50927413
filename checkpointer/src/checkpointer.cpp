// Construction, two-level set-up and the public calls of the Checkpointer; its phases live in
// snapshot.cpp, persist.cpp and restore.cpp.
#include "baton/ckpt/checkpointer.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "checkpointer_impl.hpp"
#include "tensor_box.hpp"
#include "common/baton_contract.hpp"
#include "common/owned_dir.hpp"
#include "io.hpp"

namespace baton::ckpt {

namespace fs = std::filesystem;

namespace {

// The legacy seq key stays reserved: a reader would take it for the seq of an older manifest.
const std::vector<std::string> kReservedFields = { "format_version", "iteration", "epoch", "created_unix",
    "total_bytes", "regions", "blobs", "timings", "files", "library_version", "manifest_checksum", "job_id",
    contract::kManifestSeqKey, contract::kLegacyManifestSeqKey, "final", "training_done", "world_size" };

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

} // namespace

Checkpointer::Impl::Impl(Options opts)
    : options(std::move(opts))
    , coordinator(options.coordinator)
    , distributed(coordinator && coordinator->size() > 1)
    , backend(makeDeviceBackend())
    , pool(options.copyThreads != 0 ? options.copyThreads : defaultCopyThreads())
{ }

void Checkpointer::Impl::log(const std::string& message) const
{
    if (options.log)
        options.log(message);
    else
        std::cerr << "baton-ckpt: " << message << std::endl;
}

Checkpointer::Checkpointer(Options options)
{
    options.validate();
    std::error_code ec;
    io::createDirectories(options.chainDir, io::directoryMode(options.fileMode));
    if (!fs::is_directory(options.chainDir, ec))
        throw Error("chain directory " + options.chainDir.string() + " is not a directory");
    options.identifyFromEnvironment();
    auto impl = std::make_unique<Impl>(std::move(options));
    // Only one process cleans the chain: with several ranks, rank 0, before the first collective, so
    // that no rank can have started writing into what it removes.
    if (impl->rank() == 0) {
        removeStaleTemporaries(impl->options.chainDir);
        removeStaleCoordinatorSessions(impl->options.chainDir);
    }
    if (impl->distributed) {
        // Every rank learns rank 0's tag (it names the shared temporary directories, so that rank 0's
        // clean-up knows when their writer is gone) and that all agree on the world.
        nlohmann::json hello = { { "tag", temporaryOwnerTag() }, { "size", impl->coordinator->size() } };
        auto all = impl->coordinator->allGather("hello", hello.dump());
        for (std::size_t r = 0; r < all.size(); ++r) {
            auto other = nlohmann::json::parse(all[r], nullptr, false);
            if (other.is_discarded() || !other.is_object()
                || other.value("size", -1) != impl->coordinator->size())
                throw ConfigError("rank " + std::to_string(r) + " does not agree on the world size "
                    + std::to_string(impl->coordinator->size()));
        }
        impl->leaderTag = nlohmann::json::parse(all[0]).value("tag", std::string());
        if (impl->leaderTag.empty())
            throw Error("rank 0 sent no temporary directory tag");
    }
    impl_ = std::move(impl);
    if (!impl_->options.localDir.empty())
        impl_->startTwoLevel();
    if (impl_->options.stagingBytes > 0)
        impl_->ensureStaging(impl_->options.stagingBytes);
    impl_->persister = std::thread([impl = impl_.get()] { impl->persistLoop(); });
}

// The node-local directory must be this user's own and reached through no one else's: on a node's
// scratch disk another user could have made a directory on the way first, and would then read or replace
// this chain's checkpoints. It is opened by the plugin's rule (common/owned_dir.hpp), every component
// root's or this user's, and then used through its descriptor only. Whatever keeps two levels from
// working leaves one: training goes on, checkpointing to the chain directory.
void Checkpointer::Impl::startTwoLevel()
{
    // With several ranks the decision is collective: either every rank has a usable node-local
    // directory or all use one level, since the chain's commit needs every rank's part.
    std::string unusable;
    const fs::path level = distributed ? options.localDir / ("rank-" + std::to_string(rank())) : options.localDir;
    try {
        // Links are the user's to make above the directory (the checkpointer runs as that user); the
        // plugin, which knows the administrator's part of local_root, has walked it more strictly.
        const std::string path = options.localDir.lexically_normal().string();
        const fs::path levelPath = level.lexically_normal();
        os::OwnedDir opened = os::openOwnedDir(path, path, ::geteuid(), true);
        if (distributed)
            opened = os::openOwnedDir(levelPath.string(), path, ::geteuid(), true);
        const fs::path byDescriptor = "/proc/self/fd/" + std::to_string(opened.fd.get());
        struct stat held { }, named { };
        if (::fstat(opened.fd.get(), &held) != 0 || ::stat(byDescriptor.c_str(), &named) != 0
            || held.st_dev != named.st_dev || held.st_ino != named.st_ino)
            throw Error("cannot reach " + levelPath.string() + " through its descriptor (is /proc mounted?)");
        removeStaleTemporaries(byDescriptor);
        localLevelFd = std::move(opened.fd);
        localLevel = byDescriptor;
        localLevelName = levelPath;
    } catch (const std::exception& e) {
        unusable = e.what();
    }
    if (distributed) {
        for (const auto& other : coordinator->allGather("two-level", unusable)) {
            if (unusable.empty() && !other.empty())
                unusable = "another rank's: " + other;
        }
    }
    if (!unusable.empty()) {
        localLevelFd.reset();
        localLevel.clear();
        localLevelName.clear();
        log("node-local directory unusable, checkpointing to the chain directory only: " + unusable);
        return;
    }
    nodeName = options.nodeName;
    if (const char* slurmNode = std::getenv("SLURMD_NODENAME"); nodeName.empty() && slurmNode != nullptr)
        nodeName = slurmNode;
    if (char host[256] = {}; nodeName.empty() && ::gethostname(host, sizeof host - 1) == 0)
        nodeName = host;
    DrainSettings settings;
    settings.sharedDir = options.chainDir;
    settings.keep = options.keep;
    settings.fileMode = options.fileMode;
    settings.bytesPerSecond = options.drainBytesPerSecond;
    settings.log = [this](const std::string& message) { log(message); };
    if (distributed) {
        settings.coordinator = coordinator;
        settings.leaderTag = leaderTag;
    }
    drainer = std::make_unique<Drainer>(std::move(settings));
}

Checkpointer::~Checkpointer()
{
    {
        std::unique_lock lock(impl_->mutex);
        impl_->changed.wait(lock, [this] { return impl_->phase == Phase::Idle; });
    }
    // The newest checkpoint reaches the chain directory before the process goes: its node-local copy is
    // of no use to a successor on another node.
    waitDurable();
    {
        std::lock_guard lock(impl_->mutex);
        impl_->enter(Phase::Closed);
    }
    impl_->persister.join();
    if (impl_->staging != nullptr)
        impl_->backend->freeStaging(impl_->staging, impl_->stagingCapacity);
}

namespace {

// A new address keeps the layout; a tensor piece describes its elements, so a new size drops it (the
// caller sets the piece of the new size).
RegionLayout keptLayout(const RegionSpec& old, std::size_t size)
{
    return old.layout.kind == RegionLayout::Kind::Box && old.size != size ? RegionLayout {} : old.layout;
}

void checkTensorPiece(const std::string& name, const TensorPiece& piece, std::size_t size, bool distributed)
{
    const std::string where = "region '" + name + "'";
    if (piece.elementSize == 0 || size % piece.elementSize != 0)
        throw Error(where + ": " + std::to_string(size) + " bytes are not whole elements of "
            + std::to_string(piece.elementSize) + " bytes");
    if (piece.writers == 0 || piece.writer >= piece.writers)
        throw Error(where + ": writer " + std::to_string(piece.writer) + " of " + std::to_string(piece.writers));
    try {
        const auto geometry = registeredPiece(piece, size);
        if (!piece.strides.empty() && size != stridedSpan(piece.boxLength, piece.strides) * piece.elementSize)
            throw Error("a strided shard spans " + std::to_string(stridedSpan(piece.boxLength, piece.strides) * piece.elementSize)
                + " bytes, not " + std::to_string(size));
        // One process holds every tensor whole, and writes it as one.
        if (!distributed && (geometry.count != volume(piece.shape) * piece.elementSize || piece.writers != 1))
            throw Error("a process without a coordinator holds whole tensors, written by itself");
    } catch (const Error& e) {
        throw Error(where + ": " + e.what());
    }
}

} // namespace

void Checkpointer::registerRegion(const std::string& name, void* data, std::size_t size)
{
    validateName("region", name);
    if (data == nullptr && size > 0)
        throw Error("region '" + name + "': null pointer with a non-zero size");
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock); // the in-flight snapshot may still read the old address
    auto& spec = impl_->regions[name];
    spec = RegionSpec { data, size, -1, nullptr, keptLayout(spec, size) };
    impl_->stagingPrepared = false;
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
    auto& spec = impl_->regions[name];
    spec = RegionSpec { devicePtr, size, device, stream, keptLayout(spec, size) };
    impl_->stagingPrepared = false;
}

void Checkpointer::unregisterRegion(const std::string& name)
{
    std::unique_lock lock(impl_->mutex);
    impl_->waitSnapshotLocked(lock);
    impl_->regions.erase(name);
    impl_->stagingPrepared = false;
}

void Checkpointer::setRegionLayout(const std::string& name, RegionLayout layout)
{
    std::unique_lock lock(impl_->mutex);
    auto found = impl_->regions.find(name);
    if (found == impl_->regions.end())
        throw Error("region '" + name + "' is not registered: register it before setting its layout");
    if (layout.kind == RegionLayout::Kind::Sharded
        && (layout.offset > layout.globalSize || found->second.size > layout.globalSize - layout.offset))
        throw Error("region '" + name + "': a shard of " + std::to_string(found->second.size) + " bytes at "
            + std::to_string(layout.offset) + " does not lie within an array of "
            + std::to_string(layout.globalSize) + " bytes");
    if (layout.kind != RegionLayout::Kind::Sharded)
        layout.offset = layout.globalSize = 0;
    if (layout.kind == RegionLayout::Kind::Box)
        checkTensorPiece(name, layout.piece, found->second.size, impl_->distributed);
    else
        layout.piece = {};
    impl_->waitSnapshotLocked(lock);
    found->second.layout = layout;
}

int Checkpointer::rank() const
{
    return impl_->rank();
}

int Checkpointer::worldSize() const
{
    return impl_->worldSize();
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
        if (!impl_->stagingPrepared)
            impl_->prepareStagingLocked();
    }
    if (start)
        requestCheckpoint(iteration);
}

void Checkpointer::prepareStaging()
{
    std::lock_guard lock(impl_->mutex);
    impl_->prepareStagingLocked();
}

void Checkpointer::beforeUpdate()
{
    auto begin = Clock::now();
    std::unique_lock lock(impl_->mutex);
    bool waited = impl_->phase == Phase::HostCopy;
    impl_->changed.wait(lock, [this] { return impl_->phase != Phase::HostCopy; });
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
    if (impl_->distributed) // a rank that dropped a request would leave the others waiting for it
        impl_->changed.wait(lock, [this] { return !impl_->inFlight(); });
    if (impl_->inFlight()) {
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
    impl_->changed.wait(lock, [this] { return !impl_->inFlight(); });
    return impl_->lastCommitted;
}

bool Checkpointer::inFlight() const
{
    std::lock_guard lock(impl_->mutex);
    return impl_->inFlight();
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

DrainStatus Checkpointer::drainStatus() const
{
    return impl_->drainer ? impl_->drainer->status() : DrainStatus {};
}

bool Checkpointer::waitDurable()
{
    const bool committed = wait();
    if (!impl_->drainer)
        return committed;
    const DrainStatus status = impl_->drainer->status();
    return !status.pendingIteration || impl_->drainer->waitFor(*status.pendingIteration);
}

} // namespace baton::ckpt
