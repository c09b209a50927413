// How the ranks of one job agree: the collectives a multi-rank checkpoint needs (all-gather and
// broadcast of small byte strings, a barrier), behind an interface so that a framework's own transport
// (torch.distributed, MPI) or the file system can carry them.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "baton/ckpt/error.hpp"

namespace baton::ckpt {

// A collective did not complete: a rank is gone or too slow. The checkpoint it belonged to is not
// committed; restore throws it (every rank must resume from the same checkpoint or none).
class CoordinationError : public Error {
public:
    using Error::Error;
};

// Every rank calls the same collectives in the same order. `key` names the operation (unique within a
// launch, the same on every rank): transports that match operations by order alone may ignore it.
class Coordinator {
public:
    virtual ~Coordinator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Every rank's bytes, indexed by rank. Throws CoordinationError when a rank does not take part in time.
    virtual std::vector<std::string> allGather(std::string_view key, std::string_view bytes) = 0;
    // The bytes of `root` (the other ranks' `bytes` are ignored).
    virtual std::string broadcast(std::string_view key, std::string_view bytes, int root);
    virtual void barrier(std::string_view key);
};

// One process, no peers: collectives return at once.
class SoloCoordinator final : public Coordinator {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::vector<std::string> allGather(std::string_view key, std::string_view bytes) override;
};

// Through a directory all ranks see (the chain directory is shared by the ranks of a job, on one node or
// several): each rank publishes a file per operation (written, fsynced, renamed into place) and polls for
// the others'. Needs no framework; a wait is bounded by `timeout`.
//
// `session` must be unique for each launch of the job and the same on all its ranks (Slurm's job and step
// id are), so that files of an earlier launch are never taken for this one's; one FileCoordinator per
// rank and session (operations are numbered in call order). Rank 0 removes each operation's files once
// every rank has reached the next one.
class FileCoordinator final : public Coordinator {
public:
    FileCoordinator(std::filesystem::path chainDir, std::string session, int rank, int size,
        std::chrono::milliseconds timeout = std::chrono::minutes(10));

    // Rank and size from BATON_RANK / BATON_WORLD_SIZE, else, inside a Slurm job step (SLURM_STEP_ID
    // numeric: srun), SLURM_PROCID / SLURM_NTASKS, else 0 / 1; the session from BATON_COORD_SESSION, else
    // "<SLURM_JOB_ID>.<SLURM_STEP_ID>" inside a step; the timeout from
    // BATON_COORD_TIMEOUT (seconds, 1..86400, default 600). Null for a world of one process. Throws
    // ConfigError naming a bad variable, or when the world size is above 1 and no session is known.
    static std::unique_ptr<FileCoordinator> fromEnvironment(const std::filesystem::path& chainDir);

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::vector<std::string> allGather(std::string_view key, std::string_view bytes) override;
    const std::filesystem::path& directory() const { return dir_; }

private:
    std::filesystem::path dir_;
    int rank_;
    int size_;
    std::chrono::milliseconds timeout_;
    std::uint64_t operations_ = 0; // collectives called so far
    std::string broken_; // set by a timeout: every later operation fails at once
    std::string previous_; // the last completed operation's file stem (rank 0 removes its files)
};

// The chain directory's folder of coordinator sessions (".baton-coord").
inline constexpr const char* kCoordinatorDirName = ".baton-coord";

// Removes coordinator sessions untouched for a day (run by rank 0 when a Checkpointer starts).
void removeStaleCoordinatorSessions(const std::filesystem::path& chainDir);

} // namespace baton::ckpt
