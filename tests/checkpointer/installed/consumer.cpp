// A C++ program built against an installed baton with nothing but `pkg-config baton-ckpt`: the C++ API
// writes a checkpoint and restores it.
#include <baton/ckpt/checkpointer.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CHAIN_DIR\n", argv[0]);
        return 2;
    }
    baton::ckpt::Options options;
    options.chainDir = argv[1];
    std::vector<float> weights(1024);
    for (std::size_t i = 0; i < weights.size(); ++i)
        weights[i] = static_cast<float>(i) * 0.5f;
    {
        baton::ckpt::Checkpointer ckpt(options);
        ckpt.registerRegion("weights", weights.data(), weights.size() * sizeof(float));
        ckpt.setManifestField("note", "from an installed baton");
        if (!ckpt.checkpointNow(9) || !ckpt.wait()) {
            std::fprintf(stderr, "checkpoint failed: %s\n", ckpt.lastError().c_str());
            return 1;
        }
    }
    std::vector<float> restored(weights.size());
    baton::ckpt::Checkpointer ckpt(options);
    ckpt.registerRegion("weights", restored.data(), restored.size() * sizeof(float));
    const auto result = ckpt.restore();
    if (!result.restored || result.iteration != 9 || restored != weights) {
        std::fprintf(stderr, "restore: restored %d, iteration %llu\n", result.restored ? 1 : 0,
            static_cast<unsigned long long>(result.iteration));
        return 1;
    }
    std::printf("C++: restored iteration %llu, values equal\n", static_cast<unsigned long long>(result.iteration));
    return 0;
}
