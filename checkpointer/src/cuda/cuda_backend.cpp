// The CUDA backend: pinned staging, snapshot copies on a dedicated stream per device ordered after an
// event on the application's stream, and a stream wait (not a host block) before the next update.
#include "checkpointer/src/device_backend.hpp"

#include <cuda_runtime.h>

#include <map>

#include "baton/ckpt/error.hpp"

namespace baton::ckpt {

namespace {

void check(cudaError_t status, const std::string& what)
{
    if (status != cudaSuccess)
        throw Error(what + ": " + cudaGetErrorString(status));
}

// Restores the calling thread's current device when it goes out of scope.
class DeviceScope {
public:
    explicit DeviceScope(int device)
    {
        check(cudaGetDevice(&previous_), "cudaGetDevice");
        check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
    }
    ~DeviceScope() { cudaSetDevice(previous_); }
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

private:
    int previous_ = 0;
};

struct PerDevice {
    cudaStream_t stream = nullptr;
    cudaEvent_t ready = nullptr; // recorded on an application stream
    cudaEvent_t copied = nullptr; // recorded on `stream` after the snapshot copies
    void* spare = nullptr; // device-side snapshot buffer
    std::size_t spareSize = 0;
    std::size_t spareUsed = 0;
    bool used = false;
};

struct StagedOnDevice {
    std::byte* host;
    const void* spare;
    std::size_t size;
    int device;
};

class CudaBackend final : public DeviceBackend {
public:
    explicit CudaBackend(int count)
        : count_(count)
    { }

    ~CudaBackend() override
    {
        for (auto& [id, d] : devices_) {
            cudaSetDevice(id);
            if (d.stream != nullptr)
                cudaStreamSynchronize(d.stream);
            cudaFree(d.spare);
            cudaEventDestroy(d.ready);
            cudaEventDestroy(d.copied);
            cudaStreamDestroy(d.stream);
        }
    }

    bool usable() const override { return true; }
    std::string describe() const override { return "CUDA, " + std::to_string(count_) + " device(s)"; }

    std::byte* allocateStaging(std::size_t size) override
    {
        void* p = nullptr;
        check(cudaHostAlloc(&p, size, cudaHostAllocPortable),
            "cannot allocate " + std::to_string(size) + " bytes of pinned staging memory");
        return static_cast<std::byte*>(p);
    }

    void freeStaging(std::byte* data, std::size_t) noexcept override { cudaFreeHost(data); }

    void checkDeviceRegion(void* pointer, std::size_t, int deviceId) override
    {
        if (deviceId >= count_)
            throw Error("device " + std::to_string(deviceId) + " does not exist (" + std::to_string(count_)
                + " found)");
        cudaPointerAttributes attributes {};
        check(cudaPointerGetAttributes(&attributes, pointer), "cannot inspect a device pointer");
        if ((attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)
            || attributes.device != deviceId)
            throw Error("pointer is not device memory of device " + std::to_string(deviceId));
    }

    void beginSnapshot(const std::vector<DeviceCopy>& copies, bool onDevice) override
    {
        staged_.clear();
        for (auto& [id, d] : devices_) {
            d.used = false;
            d.spareUsed = 0;
        }
        if (onDevice)
            reserveSpare(copies);
        for (const auto& copy : copies) {
            DeviceScope scope(copy.deviceId);
            PerDevice& d = device(copy.deviceId);
            auto appStream = static_cast<cudaStream_t>(copy.stream);
            check(cudaEventRecord(d.ready, appStream), "cudaEventRecord");
            check(cudaStreamWaitEvent(d.stream, d.ready, 0), "cudaStreamWaitEvent");
            if (onDevice) {
                void* target = static_cast<std::byte*>(d.spare) + d.spareUsed;
                d.spareUsed += copy.size;
                check(cudaMemcpyAsync(target, copy.device, copy.size, cudaMemcpyDeviceToDevice, d.stream),
                    "device-side snapshot copy");
                staged_.push_back({ copy.host, target, copy.size, copy.deviceId });
            } else {
                check(cudaMemcpyAsync(copy.host, copy.device, copy.size, cudaMemcpyDeviceToHost, d.stream),
                    "device-to-host snapshot copy");
            }
            d.used = true;
        }
        for (auto& [id, d] : devices_) {
            if (d.used) {
                DeviceScope scope(id);
                check(cudaEventRecord(d.copied, d.stream), "cudaEventRecord");
            }
        }
    }

    void orderAfterSnapshot(const std::vector<DeviceCopy>& copies) override
    {
        for (const auto& copy : copies) {
            DeviceScope scope(copy.deviceId);
            check(
                cudaStreamWaitEvent(static_cast<cudaStream_t>(copy.stream), device(copy.deviceId).copied, 0),
                "cudaStreamWaitEvent");
        }
    }

    void finishSnapshot() override
    {
        for (const auto& s : staged_) {
            DeviceScope scope(s.device);
            check(cudaMemcpyAsync(s.host, s.spare, s.size, cudaMemcpyDeviceToHost, device(s.device).stream),
                "device-to-host copy of a device-side snapshot");
        }
        staged_.clear();
        for (auto& [id, d] : devices_) {
            if (d.used) {
                DeviceScope scope(id);
                check(cudaStreamSynchronize(d.stream), "waiting for snapshot copies");
            }
        }
    }

    void restoreToDevice(const DeviceCopy& copy) override
    {
        DeviceScope scope(copy.deviceId);
        check(
            cudaMemcpy(copy.device, copy.host, copy.size, cudaMemcpyHostToDevice), "restore copy to device");
    }

private:
    PerDevice& device(int id)
    {
        auto [it, inserted] = devices_.try_emplace(id);
        if (inserted) {
            DeviceScope scope(id);
            check(cudaStreamCreateWithFlags(&it->second.stream, cudaStreamNonBlocking), "cudaStreamCreate");
            check(cudaEventCreateWithFlags(&it->second.ready, cudaEventDisableTiming), "cudaEventCreate");
            check(cudaEventCreateWithFlags(&it->second.copied, cudaEventDisableTiming), "cudaEventCreate");
        }
        return it->second;
    }

    void reserveSpare(const std::vector<DeviceCopy>& copies)
    {
        std::map<int, std::size_t> needed;
        for (const auto& copy : copies)
            needed[copy.deviceId] += copy.size;
        for (const auto& [id, bytes] : needed) {
            PerDevice& d = device(id);
            if (d.spareSize >= bytes)
                continue;
            DeviceScope scope(id);
            cudaFree(d.spare);
            d.spare = nullptr;
            d.spareSize = 0;
            check(cudaMalloc(&d.spare, bytes),
                "cannot allocate " + std::to_string(bytes)
                    + " bytes of device memory for a GPU-side snapshot");
            d.spareSize = bytes;
        }
    }

    int count_;
    std::map<int, PerDevice> devices_;
    std::vector<StagedOnDevice> staged_;
};

} // namespace

// Null when the runtime finds no usable device (no driver, no GPU): the caller takes the host path.
std::unique_ptr<DeviceBackend> makeCudaBackend()
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
        cudaGetLastError(); // clear the sticky error so that later calls start clean
        return nullptr;
    }
    // A device may be counted yet unusable in this process: in a child forked after its parent had
    // initialised CUDA every later call fails, and so would the pinned staging pool. Making the context
    // here (the pool would make it anyway) tells that apart, and such a process takes the host path.
    if (cudaFree(nullptr) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return std::make_unique<CudaBackend>(count);
}

} // namespace baton::ckpt
