// The CUDA path: device regions snapshotted on a dedicated stream (to pinned host memory or to spare
// device memory), updates ordered after the snapshot, restore back to the device. Needs a GPU: without
// a usable device the binary exits 77 (skipped).
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <iostream>
#include <vector>

#include "tests/support/process.hpp"

using namespace baton::ckpt;

namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

Options quietOptions(const std::filesystem::path& dir)
{
    Options options;
    options.chainDir = dir;
    options.log = [](std::string_view) {};
    return options;
}

class DeviceRoundTrip : public ::testing::TestWithParam<bool> { };

TEST_P(DeviceRoundTrip, SnapshotIsTakenBeforeTheNextUpdate)
{
    const bool onDevice = GetParam();
    baton::test::TempDir dir("ckpt-cuda");
    const std::size_t size = (16 << 20) + 3;
    void* weights = nullptr;
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaMalloc(&weights, size));
    CUDA_OK(cudaStreamCreate(&stream));
    std::vector<unsigned char> host(size, 0x11);
    std::vector<std::byte> hostRegion(4097, std::byte { 0x22 });
    CUDA_OK(cudaMemcpy(weights, host.data(), size, cudaMemcpyHostToDevice));
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ASSERT_TRUE(ckpt.deviceAvailable());
        ckpt.setDeviceSnapshot(onDevice);
        ckpt.registerDeviceRegion("weights", weights, size, 0, stream);
        ckpt.registerRegion("host", hostRegion.data(), hostRegion.size());
        ASSERT_TRUE(ckpt.requestCheckpoint(1));
        ckpt.beforeUpdate();
        // The "update" is queued on the application stream after beforeUpdate: it must not reach the
        // snapshot.
        CUDA_OK(cudaMemsetAsync(weights, 0x33, size, stream));
        ASSERT_TRUE(ckpt.wait()) << ckpt.lastError();
        CUDA_OK(cudaStreamSynchronize(stream));
    }
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ckpt.registerDeviceRegion("weights", weights, size, 0, stream);
        std::vector<std::byte> hostOut(4097);
        ckpt.registerRegion("host", hostOut.data(), hostOut.size());
        auto result = ckpt.restore();
        ASSERT_TRUE(result.restored);
        EXPECT_EQ(hostOut, hostRegion);
    }
    std::vector<unsigned char> out(size);
    CUDA_OK(cudaMemcpy(out.data(), weights, size, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(out == host);
    cudaStreamDestroy(stream);
    cudaFree(weights);
}

INSTANTIATE_TEST_SUITE_P(Targets, DeviceRoundTrip, ::testing::Values(false, true),
    [](const auto& info) { return info.param ? "deviceSnapshot" : "pinnedHost"; });

TEST(Cuda, HostPointerIsRefusedAsDeviceRegion)
{
    baton::test::TempDir dir("ckpt-cuda-bad");
    Checkpointer ckpt(quietOptions(dir.path()));
    std::vector<std::byte> host(100);
    EXPECT_THROW(ckpt.registerDeviceRegion("x", host.data(), host.size(), 0), Error);
}

} // namespace

int main(int argc, char** argv)
{
    int count = 0;
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        std::cout << "SKIP: no usable CUDA device ("
                  << (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") << ")" << std::endl;
        return 77;
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
