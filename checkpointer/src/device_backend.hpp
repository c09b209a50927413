// What the checkpointer needs from a GPU runtime. Two implementations: CUDA (cuda/cuda_backend.cpp,
// built when CUDA is enabled and chosen when a device is usable at run time) and host-only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace baton::ckpt {

// One device region and its place in the host staging pool.
struct DeviceCopy {
    std::byte* host = nullptr;
    void* device = nullptr;
    std::size_t size = 0;
    int deviceId = 0;
    void* stream = nullptr; // the application's cudaStream_t for this region
};

class DeviceBackend {
public:
    virtual ~DeviceBackend() = default;

    virtual bool usable() const = 0;
    virtual std::string describe() const = 0;

    // Page-aligned staging memory; pinned when a device is usable. Throws Error.
    virtual std::byte* allocateStaging(std::size_t size) = 0;
    virtual void freeStaging(std::byte* data, std::size_t size) noexcept = 0;

    // Throws Error if `pointer` is not device memory of `deviceId`.
    virtual void checkDeviceRegion(void* pointer, std::size_t size, int deviceId) = 0;
    // Queues copies of device regions on a dedicated stream, ordered after the work already queued on each
    // region's stream. With `onDevice`, the copy goes to spare device memory first (a GPU-side snapshot).
    virtual void beginSnapshot(const std::vector<DeviceCopy>& copies, bool onDevice) = 0;
    // Makes each region's stream wait for the snapshot copies: later updates cannot overtake them.
    virtual void orderAfterSnapshot(const std::vector<DeviceCopy>& copies) = 0;
    // Blocks until the snapshot bytes are in host staging.
    virtual void finishSnapshot() = 0;
    // Copies restored bytes to a device region and waits for the copy.
    virtual void restoreToDevice(const DeviceCopy& copy) = 0;
};

std::unique_ptr<DeviceBackend> makeHostBackend();
// The CUDA backend if CUDA is built in and a device is usable, else the host backend.
std::unique_ptr<DeviceBackend> makeDeviceBackend();

} // namespace baton::ckpt
