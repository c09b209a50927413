#include "device_backend.hpp"

#include "baton_version.h"

namespace baton::ckpt {

#if BATON_HAVE_CUDA
std::unique_ptr<DeviceBackend> makeCudaBackend(); // cuda/cuda_backend.cpp; null without a usable device
#endif

std::unique_ptr<DeviceBackend> makeDeviceBackend()
{
#if BATON_HAVE_CUDA
    if (auto cuda = makeCudaBackend())
        return cuda;
#endif
    return makeHostBackend();
}

} // namespace baton::ckpt
