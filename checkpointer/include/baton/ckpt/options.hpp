// Settings of a Checkpointer. Each has an environment equivalent (docs/contracts.md) where one exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace baton::ckpt {

class Coordinator;

inline constexpr double kMaxHandoverWait = 3600; // seconds

struct Options {
    // Directory of the chain; checkpoints live directly inside it (BATON_CHAIN_DIR). Created if missing.
    std::filesystem::path chainDir;
    // Committed checkpoints to retain (BATON_KEEP); older ones go only after a newer one has committed.
    int keep = 2;
    // Staging pool allocated up front; it grows (between checkpoints) when the registered state is larger.
    std::size_t stagingBytes = 0;
    // Threads copying host regions into the staging pool and back on restore; 0 = min(4, the CPUs this
    // process may run on: its affinity mask, which a Slurm job's cores bound).
    unsigned copyThreads = 0;
    // Write and read data with O_DIRECT where the file system supports it.
    bool directIo = true;
    // Permissions of the checkpoint files the Checkpointer creates; the directories it creates (the chain
    // directory and its missing parents, checkpoint directories) get the same bits plus search where read
    // is granted. Default 0600 / 0700: private to the user. E.g. 0640 shares checkpoints with the group
    // (0750 directories). The umask applies on top; existing directories are left as they are.
    unsigned fileMode = 0600;
    // Receives warnings and errors (one line each); default: standard error.
    std::function<void(std::string_view)> log;
    // The writer's Slurm job id and its job's position in the chain (seq, 0 for the first job), recorded
    // in every manifest (`job_id`, `seq`). Left unset, the Checkpointer takes BATON_JOB_ID and
    // BATON_CHAIN_SEQ (where that is unset, its deprecated alias BATON_RESTART_COUNT) when they hold
    // whole numbers: they describe the process, not a choice of the program.
    std::optional<std::uint64_t> jobId;
    std::optional<std::uint64_t> chainSeq;
    // Seconds restore() waits for the predecessor's handover (BATON_HANDOVER_WAIT, 0..3600, 0 = off):
    // with chainSeq n > 0, until a committed checkpoint is final with seq >= n - 1.
    double handoverWaitSeconds = 0;
    // Two-level storage (BATON_LOCAL_DIR): a node-local directory for this chain. Each checkpoint then
    // commits there first, at local speed, and is drained to chainDir in the background, verified there
    // and committed with the same manifest-last rule. Only the copy in chainDir is durable: it alone counts
    // for a handover, for training_done and for the provisioner; a final (or training_done) checkpoint
    // returns only once its copy in chainDir has committed. Empty: one level, chainDir only. A process of
    // several ranks uses chainDir only (logged).
    std::filesystem::path localDir;
    // Committed checkpoints kept in localDir (BATON_LOCAL_KEEP); the one being drained is always kept.
    int localKeep = 1;
    // Drain bandwidth into chainDir in bytes per second (BATON_DRAIN_MBPS, in MB/s), so that the copy does
    // not starve the training's own I/O on the shared file system; 0 = unbounded.
    double drainBytesPerSecond = 0;
    // The node this process runs on, recorded in node-local manifests (`node`): a node-local copy is
    // restored only on the node that wrote it. Empty: SLURMD_NODENAME, else the host name.
    std::string nodeName;
    // The ranks of a job that checkpoint together (coordinator.hpp); null or a world of one: this
    // process alone (format version 1). With more ranks, every rank constructs its Checkpointer, requests
    // the same checkpoints and calls restore() together; rank 0 commits and runs retention.
    std::shared_ptr<Coordinator> coordinator;

    // Reads BATON_CHAIN_DIR (required, absolute), BATON_KEEP (integer 1..1000), BATON_JOB_ID,
    // BATON_CHAIN_SEQ (whole numbers), BATON_HANDOVER_WAIT (seconds, 0..3600), BATON_LOCAL_DIR
    // (absolute), BATON_LOCAL_KEEP (1..1000), BATON_DRAIN_MBPS (MB/s, >= 0), and, for a world
    // of more than one rank (BATON_WORLD_SIZE, or SLURM_NTASKS inside an srun step), a FileCoordinator
    // (FileCoordinator::fromEnvironment). Throws ConfigError naming the variable.
    static Options fromEnvironment();
    // Fills an unset jobId / chainSeq from BATON_JOB_ID / BATON_CHAIN_SEQ where those hold
    // whole numbers (anything else leaves them unknown). The Checkpointer calls it.
    void identifyFromEnvironment();

    // Throws ConfigError naming the first unusable value.
    void validate() const;
};

} // namespace baton::ckpt
