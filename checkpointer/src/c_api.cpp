// The C ABI: exceptions stop here and become -1 plus a message.
#include "baton_ckpt.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton_version.h"
#include "c_api_handle.hpp"

using baton::ckpt::Checkpointer;
using baton::ckpt::Options;

struct baton_ckpt_coord {
    std::shared_ptr<baton::ckpt::Coordinator> coordinator;
    mutable baton::ckpt::capi::LastError error;
};

namespace {

thread_local baton::ckpt::capi::LastError createError;

template<typename F> int guarded(baton_ckpt* h, F&& body)
{
    if (h == nullptr) {
        createError.set("null baton_ckpt handle");
        return -1;
    }
    h->error.clear();
    return h->error.guarded(body);
}

std::string text(const char* s)
{
    if (s == nullptr)
        throw baton::ckpt::Error("a required string argument is NULL");
    return s;
}

} // namespace

extern "C" {

const char* baton_ckpt_version(void)
{
    return BATON_VERSION;
}

baton_ckpt* baton_ckpt_create(const char* chain_dir, int keep)
{
    return baton_ckpt_create_with_mode(chain_dir, keep, Options {}.fileMode);
}

baton_ckpt* baton_ckpt_create_with_mode(const char* chain_dir, int keep, unsigned file_mode)
{
    return createError.created([&] {
        Options options;
        if (chain_dir == nullptr) {
            options = Options::fromEnvironment();
        } else {
            options.chainDir = chain_dir;
        }
        if (keep > 0)
            options.keep = keep;
        options.fileMode = file_mode;
        auto handle = std::make_unique<baton_ckpt>();
        handle->checkpointer = std::make_unique<Checkpointer>(std::move(options));
        createError.clear();
        return handle.release();
    });
}

void baton_ckpt_destroy(baton_ckpt* ckpt)
{
    delete ckpt;
}

int baton_ckpt_register_region(baton_ckpt* h, const char* name, void* data, uint64_t size)
{
    return guarded(h, [&] { h->checkpointer->registerRegion(text(name), data, size); });
}

int baton_ckpt_register_device_region(
    baton_ckpt* h, const char* name, void* device_ptr, uint64_t size, int device, void* stream)
{
    return guarded(
        h, [&] { h->checkpointer->registerDeviceRegion(text(name), device_ptr, size, device, stream); });
}

int baton_ckpt_unregister_region(baton_ckpt* h, const char* name)
{
    return guarded(h, [&] { h->checkpointer->unregisterRegion(text(name)); });
}

int baton_ckpt_set_blob(baton_ckpt* h, const char* name, const void* data, uint64_t size)
{
    return guarded(h, [&] {
        if (data == nullptr && size > 0)
            throw baton::ckpt::Error("blob data is NULL");
        h->checkpointer->setBlob(text(name), std::span(static_cast<const std::byte*>(data), size));
    });
}

int baton_ckpt_set_epoch(baton_ckpt* h, uint64_t epoch)
{
    return guarded(h, [&] { h->checkpointer->setEpoch(epoch); });
}

int baton_ckpt_set_manifest_field(baton_ckpt* h, const char* key, const char* json_text)
{
    return guarded(h, [&] {
        auto value = nlohmann::json::parse(text(json_text), nullptr, false);
        if (value.is_discarded())
            throw baton::ckpt::Error("manifest field '" + text(key) + "': not valid JSON");
        h->checkpointer->setManifestField(text(key), std::move(value));
    });
}

int baton_ckpt_after_update(baton_ckpt* h, uint64_t iteration)
{
    return guarded(h, [&] { h->checkpointer->afterUpdate(iteration); });
}

int baton_ckpt_before_update(baton_ckpt* h)
{
    return guarded(h, [&] { h->checkpointer->beforeUpdate(); });
}

int baton_ckpt_request(baton_ckpt* h, uint64_t iteration)
{
    return guarded(h, [&] {
        auto before = h->checkpointer->counters().failed;
        if (h->checkpointer->requestCheckpoint(iteration))
            return 1;
        if (h->checkpointer->counters().failed != before) {
            h->error.set(h->checkpointer->lastError());
            return -1;
        }
        return 0;
    });
}

int baton_ckpt_schedule(baton_ckpt* h)
{
    return guarded(h, [&] { h->checkpointer->scheduleCheckpoint(); });
}

int baton_ckpt_checkpoint_now(baton_ckpt* h, uint64_t iteration)
{
    return guarded(h, [&] {
        if (h->checkpointer->checkpointNow(iteration))
            return 0;
        h->error.set(h->checkpointer->lastError());
        return -1;
    });
}

int baton_ckpt_wait(baton_ckpt* h)
{
    return guarded(h, [&] {
        if (h->checkpointer->wait())
            return 0;
        h->error.set(h->checkpointer->lastError());
        return -1;
    });
}

int baton_ckpt_restore(baton_ckpt* h, uint64_t* iteration)
{
    return guarded(h, [&] {
        h->restored = h->checkpointer->restore();
        h->manifestText = h->restored.restored ? h->restored.manifest.dump() : "null";
        h->fallbackText.clear();
        for (const auto& f : h->restored.fallbacks)
            h->fallbackText += f.dir.string() + ": " + f.reason + "\n";
        if (!h->restored.restored)
            return 0;
        if (iteration != nullptr)
            *iteration = h->restored.iteration;
        return 1;
    });
}

int64_t baton_ckpt_blob_size(baton_ckpt* h, const char* name)
{
    return baton_ckpt_get_blob(h, name, nullptr, 0);
}

int64_t baton_ckpt_get_blob(baton_ckpt* h, const char* name, void* buffer, uint64_t capacity)
{
    if (h == nullptr || name == nullptr)
        return -1;
    auto it = h->restored.blobs.find(name);
    if (it == h->restored.blobs.end())
        return -1;
    if (buffer != nullptr)
        std::memcpy(buffer, it->second.data(), std::min<uint64_t>(capacity, it->second.size()));
    return static_cast<int64_t>(it->second.size());
}

const char* baton_ckpt_restored_manifest(baton_ckpt* h)
{
    return h != nullptr ? h->manifestText.c_str() : "null";
}

const char* baton_ckpt_restore_fallbacks(baton_ckpt* h)
{
    return h != nullptr ? h->fallbackText.c_str() : "";
}

int baton_ckpt_get_stats(baton_ckpt* h, baton_ckpt_stats* out)
{
    return guarded(h, [&] {
        if (out == nullptr)
            throw baton::ckpt::Error("stats pointer is NULL");
        auto s = h->checkpointer->lastCheckpoint();
        auto c = h->checkpointer->counters();
        *out = baton_ckpt_stats { s.iteration, s.bytes, s.snapshotSeconds, s.persistSeconds, s.stallSeconds,
            s.finished, s.committed, c.requested, c.committed, c.failed, c.droppedRequests };
    });
}

const char* baton_ckpt_last_error(baton_ckpt* h)
{
    return h != nullptr ? h->error.c_str() : createError.c_str();
}

baton_ckpt_coord* baton_ckpt_coord_create_file(
    const char* chain_dir, const char* session, int rank, int size, double timeout_seconds)
{
    return createError.created([&] {
        auto timeout = std::chrono::milliseconds(
            timeout_seconds > 0 ? static_cast<long long>(std::min(timeout_seconds, 86400.0) * 1000) : 600000);
        if (timeout.count() == 0)
            timeout = std::chrono::milliseconds(1);
        auto handle = std::make_unique<baton_ckpt_coord>();
        handle->coordinator = std::make_shared<baton::ckpt::FileCoordinator>(
            text(chain_dir), text(session), rank, size, timeout);
        createError.clear();
        return handle.release();
    });
}

baton_ckpt_coord* baton_ckpt_coord_from_env(const char* chain_dir)
{
    return createError.created([&] {
        auto handle = std::make_unique<baton_ckpt_coord>();
        handle->coordinator = baton::ckpt::FileCoordinator::fromEnvironment(text(chain_dir));
        if (!handle->coordinator)
            handle->coordinator = std::make_shared<baton::ckpt::SoloCoordinator>();
        createError.clear();
        return handle.release();
    });
}

void baton_ckpt_coord_destroy(baton_ckpt_coord* coord)
{
    delete coord;
}

int baton_ckpt_coord_rank(const baton_ckpt_coord* coord)
{
    return coord != nullptr ? coord->coordinator->rank() : -1;
}

int baton_ckpt_coord_size(const baton_ckpt_coord* coord)
{
    return coord != nullptr ? coord->coordinator->size() : -1;
}

int baton_ckpt_coord_barrier(baton_ckpt_coord* coord, const char* key)
{
    if (coord == nullptr)
        return -1;
    coord->error.clear();
    return coord->error.guarded([&] { coord->coordinator->barrier(text(key)); });
}

int64_t baton_ckpt_coord_broadcast(baton_ckpt_coord* coord, const char* key, int root, const void* data,
    uint64_t size, void* buffer, uint64_t capacity)
{
    if (coord == nullptr)
        return -1;
    coord->error.clear();
    int64_t result = -1;
    coord->error.guarded([&] {
        if (data == nullptr && size > 0)
            throw baton::ckpt::Error("broadcast data is NULL");
        if (buffer == nullptr && capacity > 0)
            throw baton::ckpt::Error("broadcast buffer is NULL");
        std::string bytes = coord->coordinator->broadcast(
            text(key), std::string_view(static_cast<const char*>(data), data != nullptr ? size : 0), root);
        std::memcpy(buffer, bytes.data(), std::min<std::uint64_t>(capacity, bytes.size()));
        result = static_cast<int64_t>(bytes.size());
    });
    return result;
}

const char* baton_ckpt_coord_last_error(const baton_ckpt_coord* coord)
{
    return coord != nullptr ? coord->error.c_str() : createError.c_str();
}

baton_ckpt* baton_ckpt_create_ranked(const char* chain_dir, int keep, baton_ckpt_coord* coord)
{
    return createError.created([&] {
        Options options;
        options.chainDir = text(chain_dir);
        if (keep > 0)
            options.keep = keep;
        if (coord != nullptr)
            options.coordinator = coord->coordinator;
        auto handle = std::make_unique<baton_ckpt>();
        handle->checkpointer = std::make_unique<Checkpointer>(std::move(options));
        createError.clear();
        return handle.release();
    });
}

int baton_ckpt_set_region_layout(
    baton_ckpt* h, const char* name, int layout, uint64_t offset, uint64_t global_size)
{
    return guarded(h, [&] {
        baton::ckpt::RegionLayout chosen;
        switch (layout) {
        case BATON_CKPT_PER_RANK:
            chosen = baton::ckpt::RegionLayout::perRank();
            break;
        case BATON_CKPT_REPLICATED:
            chosen = baton::ckpt::RegionLayout::replicated();
            break;
        case BATON_CKPT_SHARDED:
            chosen = baton::ckpt::RegionLayout::sharded(offset, global_size);
            break;
        default:
            throw baton::ckpt::Error("unknown region layout " + std::to_string(layout));
        }
        h->checkpointer->setRegionLayout(text(name), chosen);
    });
}

int baton_ckpt_rank(baton_ckpt* h)
{
    return guarded(h, [&] { return h->checkpointer->rank(); });
}

int baton_ckpt_world_size(baton_ckpt* h)
{
    return guarded(h, [&] { return h->checkpointer->worldSize(); });
}

} // extern "C"
