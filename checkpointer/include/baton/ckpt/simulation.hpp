// A discrete-event model of a training loop with a two-phase checkpointer, on a simulated clock. Used
// to evaluate policies offline (tests, benchmark) without sleeping: the snapshot overlaps the next
// iteration's forward and backward pass and stalls the update if it is not done; the persist runs in
// the background and slows the iterations it overlaps by a fraction.
#pragma once

#include "baton/ckpt/policy.hpp"

#include <cstdint>

namespace baton::ckpt {

struct SyntheticJobOptions {
    double computeSeconds = 0.100; // forward + backward
    double updateSeconds = 0.020; // weight update
    double snapshotSeconds = 0.150; // copy of the state into the staging buffer
    double persistSeconds = 1.000; // write to storage
    double persistSlowdown = 0.05; // iterations run this much slower while a persist overlaps them
    double jitter = 0.0; // uniform relative noise on the compute time
    std::uint64_t seed = 1;
};

// Interference: scales applied to compute, snapshot and persist times from now on.
struct Interference {
    double compute = 1.0;
    double snapshot = 1.0;
    double persist = 1.0;
};

class SyntheticJob {
public:
    explicit SyntheticJob(SyntheticJobOptions options)
        : options_(options)
        , random_(options.seed | 1)
    { }

    struct Step {
        double seconds = 0; // the iteration's wall time, stalls and interference included
        double idealSeconds = 0; // the same iteration without checkpointing
        bool committed = false; // the checkpoint in flight committed during this iteration
        CheckpointTimings timings;
    };

    void setInterference(Interference interference) { interference_ = interference; }
    // Runs one iteration; `startCheckpoint` starts one at the boundary before it (ignored, and counted,
    // while another is in flight).
    Step step(bool startCheckpoint);

    bool inFlight() const { return snapshotLeft_ > 0 || persistLeft_ > 0; }
    // The policy's answer at the last boundary, carried from one runSynthetic() call to the next.
    bool startAtNextStep = false;
    double now() const { return now_; }
    std::uint64_t refused() const { return refused_; }

private:
    double noise();

    SyntheticJobOptions options_;
    Interference interference_;
    std::uint64_t random_;
    double now_ = 0;
    double snapshotLeft_ = 0;
    double persistLeft_ = 0;
    CheckpointTimings running_;
    std::uint64_t refused_ = 0;
};

// Drives `policy` over `job` for `iterations` iterations. Returns the run's overhead in percent,
// (actual − ideal) / ideal · 100, over the iterations after `skip`.
double runSynthetic(Policy& policy, SyntheticJob& job, std::uint64_t iterations, std::uint64_t skip = 0);

// The same with a fixed interval k (no policy): a checkpoint every k iterations.
double runFixedInterval(SyntheticJob& job, std::uint64_t k, std::uint64_t iterations, std::uint64_t skip = 0);

} // namespace baton::ckpt
