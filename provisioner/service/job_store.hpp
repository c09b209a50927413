// The `jobs` table: each chain's jobs as slurmctld reported them, by seq.
#pragma once

#include "cluster.hpp"

#include "db/table_store.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace baton::service {

struct JobRow {
    int seq = 0;
    std::int64_t slurmJobId = 0;
    std::string state;
    std::optional<std::int64_t> submitTime, startTime, endTime, timeLimitSeconds;
    std::optional<int> exitCode;
    bool withdrawn = false; // ended without running: it gave its seq back
};

// The columns of a job row in a result, found by name once; `prefix` where a statement reads several
// jobs in one row (see jobColumnsOf).
class JobColumns {
public:
    explicit JobColumns(const db::Result& result, std::string_view prefix = "");
    JobRow read(const db::Result& result, int row) const;
    // Whether the row holds a job there (a left join may find none).
    bool present(const db::Result& result, int row) const { return !result.isNull(row, at_[Seq]); }

private:
    enum Column { Seq, SlurmJobId, State, Submit, Start, End, TimeLimit, ExitCode, Withdrawn, Count };
    static constexpr std::array<std::string_view, Count> names { "seq", "slurm_job_id", "state", "submit_unix",
        "start_unix", "end_unix", "time_limit_s", "exit_code", "withdrawn" };
    std::array<int, Count> at_;
};

class JobStore : public db::TableStore {
public:
    using TableStore::TableStore;

    struct Write {
        std::int64_t chainId = 0;
        int seq = 0;
        ClusterJob job;
    };
    // A job row the database did not take (a second live job of one seq, a value it refused), and why.
    struct Rejected {
        std::int64_t chainId = 0;
        std::int64_t slurmJobId = 0;
        std::string reason;
    };
    // Inserts or updates the job rows from slurmctld's facts, in one statement. The batch never fails
    // for one chain's row: the rows refused are returned, the others written.
    std::vector<Rejected> upsert(std::span<const Write> writes);
    std::vector<Rejected> upsert(std::int64_t chainId, int seq, const ClusterJob& job)
    {
        const Write write { chainId, seq, job };
        return upsert(std::span(&write, 1));
    }
    std::vector<JobRow> ofChain(std::int64_t chainId);
    // The job, and the chain it belongs to.
    struct Owned {
        std::int64_t chainId = 0;
        JobRow job;
    };
    std::optional<Owned> bySlurmId(std::int64_t slurmJobId);
};

} // namespace baton::service
