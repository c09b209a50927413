// A kernel that keeps the GPU busy for a given number of clock cycles: the stand-in for a training
// step's forward and backward pass in gpu_bench, so that the loop's compute time is known and fixed.
#include <cuda_runtime.h>

namespace {

__global__ void spin(long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}

} // namespace

// One block of one thread: the copy engines and the rest of the GPU stay free, as in a real step
// whose kernels leave the copy engine idle.
cudaError_t launchSpin(cudaStream_t stream, long long cycles)
{
    spin<<<1, 1, 0, stream>>>(cycles);
    return cudaGetLastError();
}
