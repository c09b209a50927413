// The backend without a GPU: staging is page-aligned anonymous memory; device regions are refused.
#include "device_backend.hpp"

#include <sys/mman.h>

#include "baton/ckpt/error.hpp"
#include "io.hpp"

namespace baton::ckpt {

namespace {

class HostBackend final : public DeviceBackend {
public:
    bool usable() const override { return false; }
    std::string describe() const override { return "host only (no usable CUDA device)"; }

    std::byte* allocateStaging(std::size_t size) override
    {
        void* p = ::mmap(
            nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (p == MAP_FAILED)
            io::throwErrno("cannot allocate a staging pool of " + std::to_string(size) + " bytes");
        return static_cast<std::byte*>(p);
    }

    void freeStaging(std::byte* data, std::size_t size) noexcept override { ::munmap(data, size); }

    void checkDeviceRegion(void*, std::size_t, int) override { refuse(); }
    void beginSnapshot(const std::vector<DeviceCopy>& copies, bool) override
    {
        if (!copies.empty())
            refuse();
    }
    void orderAfterSnapshot(const std::vector<DeviceCopy>&) override { }
    void finishSnapshot() override { }
    void restoreToDevice(const DeviceCopy&) override { refuse(); }

private:
    [[noreturn]] static void refuse()
    {
        throw Error("device regions need a usable CUDA device; none was found");
    }
};

} // namespace

std::unique_ptr<DeviceBackend> makeHostBackend()
{
    return std::make_unique<HostBackend>();
}

} // namespace baton::ckpt
