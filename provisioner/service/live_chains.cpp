#include "live_chains.hpp"

namespace baton::service {

namespace {

// The tick's read starts from the live chains (their partial index) and probes each one's rows by its key:
// a year of ended chains, jobs and checkpoints must not be scanned every tick. The LIMIT in each probe
// changes no result (a chain has one row per seq) but keeps the planner from flattening the probes into
// a join that it may hash over the whole table.
// Everything a tick reads of the live chains, in one statement (one snapshot, one round trip): each
// chain with its jobs (j0_, j1_, j2_) and submissions (s0_, s1_, s2_) of seq, seq + 1 and seq + 2 (a second
// successor queued behind the first), whether its training is
// done, and when its newest checkpoint was written. These are looked up only for the chains whose
// revision or seq differs from the ones the caller read them at ($1: chain ids, $2: their revisions,
// $3: their seqs; a new seq alone changes which rows are the current and next job's).
constexpr auto tickChainsSql = db::joinSql(
    "WITH live AS MATERIALIZED (SELECT id, owner_uid, owner_name, name, state, seq, last_handover_seq, "
    "retries,"
    " reason, chain_dir, resubmit_requested, preempt_requested, updated_at, token, policy, revision FROM chains"
    " WHERE state NOT IN ('finished', 'failed', 'cancelled')),"
    " known AS (SELECT unnest($1::bigint[]) AS id, unnest($2::bigint[]) AS revision,"
    " unnest($3::int[]) AS seq),"
    " c AS (SELECT live.*, (known.revision, known.seq) IS DISTINCT FROM (live.revision, live.seq) AS stale"
    " FROM live LEFT JOIN known USING (id)) ",
    chainColumns,
    ", c.revision, c.stale,"
    " j0.seq AS j0_seq, j0.slurm_job_id AS j0_slurm_job_id, j0.state AS j0_state,"
    " extract(epoch FROM j0.submit_time)::bigint AS j0_submit_unix,"
    " extract(epoch FROM j0.start_time)::bigint AS j0_start_unix,"
    " extract(epoch FROM j0.end_time)::bigint AS j0_end_unix, j0.time_limit_s AS j0_time_limit_s,"
    " j0.exit_code AS j0_exit_code, j0.withdrawn AS j0_withdrawn,"
    " j1.seq AS j1_seq, j1.slurm_job_id AS j1_slurm_job_id, j1.state AS j1_state,"
    " extract(epoch FROM j1.submit_time)::bigint AS j1_submit_unix,"
    " extract(epoch FROM j1.start_time)::bigint AS j1_start_unix,"
    " extract(epoch FROM j1.end_time)::bigint AS j1_end_unix, j1.time_limit_s AS j1_time_limit_s,"
    " j1.exit_code AS j1_exit_code, j1.withdrawn AS j1_withdrawn,"
    " j2.seq AS j2_seq, j2.slurm_job_id AS j2_slurm_job_id, j2.state AS j2_state,"
    " extract(epoch FROM j2.submit_time)::bigint AS j2_submit_unix,"
    " extract(epoch FROM j2.start_time)::bigint AS j2_start_unix,"
    " extract(epoch FROM j2.end_time)::bigint AS j2_end_unix, j2.time_limit_s AS j2_time_limit_s,"
    " j2.exit_code AS j2_exit_code, j2.withdrawn AS j2_withdrawn,"
    " s0.seq AS s0_seq, s0.idempotency_key AS s0_idempotency_key, s0.reason AS s0_reason, s0.state AS "
    "s0_state,"
    " s0.slurm_job_id AS s0_slurm_job_id, extract(epoch FROM s0.created_at)::bigint AS s0_created_unix,"
    " coalesce(s0.error, '') AS s0_error,"
    " s1.seq AS s1_seq, s1.idempotency_key AS s1_idempotency_key, s1.reason AS s1_reason, s1.state AS "
    "s1_state,"
    " s1.slurm_job_id AS s1_slurm_job_id, extract(epoch FROM s1.created_at)::bigint AS s1_created_unix,"
    " coalesce(s1.error, '') AS s1_error,"
    " s2.seq AS s2_seq, s2.idempotency_key AS s2_idempotency_key, s2.reason AS s2_reason, s2.state AS "
    "s2_state,"
    " s2.slurm_job_id AS s2_slurm_job_id, extract(epoch FROM s2.created_at)::bigint AS s2_created_unix,"
    " coalesce(s2.error, '') AS s2_error,"
    " k.done IS NOT NULL AS training_done, extract(epoch FROM n.created_at) AS newest_checkpoint_unix,"
    " n.iteration AS newest_checkpoint_iteration, n.slurm_job_id AS newest_checkpoint_job,"
    " h.signalled_unix AS handover_signalled_unix, h.sent_unix AS handover_sent_unix,"
    " h.signal_attempts AS handover_signal_attempts FROM c"
    " LEFT JOIN LATERAL (SELECT * FROM jobs"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq ORDER BY withdrawn, id DESC LIMIT 1) j0 ON true"
    " LEFT JOIN LATERAL (SELECT * FROM jobs"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq + 1 ORDER BY withdrawn, id DESC LIMIT 1) j1"
    " ON true"
    " LEFT JOIN LATERAL (SELECT * FROM jobs"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq + 2 ORDER BY withdrawn, id DESC LIMIT 1) j2"
    " ON true"
    " LEFT JOIN LATERAL (SELECT * FROM submissions"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq LIMIT 1) s0 ON true"
    " LEFT JOIN LATERAL (SELECT * FROM submissions"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq + 1 LIMIT 1) s1 ON true"
    " LEFT JOIN LATERAL (SELECT * FROM submissions"
    " WHERE c.stale AND chain_id = c.id AND seq = c.seq + 2 LIMIT 1) s2 ON true"
    " LEFT JOIN LATERAL (SELECT true AS done FROM checkpoints"
    " WHERE c.stale AND chain_id = c.id AND training_done LIMIT 1) k ON true"
    " LEFT JOIN LATERAL (SELECT created_at, iteration, slurm_job_id FROM checkpoints"
    " WHERE c.stale AND chain_id = c.id ORDER BY iteration DESC LIMIT 1) n ON true"
    // The handover's signal changes without the chain's revision: read every tick, of the chains in
    // handover only.
    " LEFT JOIN LATERAL (SELECT extract(epoch FROM signalled_at)::bigint AS signalled_unix,"
    " extract(epoch FROM signal_sent_at)::bigint AS sent_unix, signal_attempts FROM handovers"
    " WHERE c.state = 'handover' AND chain_id = c.id AND predecessor_seq = c.seq) h ON true"
    " ORDER BY c.id");
constexpr db::Statement selectTickChains { "tick_live_chains", tickChainsSql.data(), true };

// The cached chains, as the statement's arrays of ids, revisions and seqs.
db::Params knownChains(const LiveChainCache& cache)
{
    std::string ids = "{", revisions = "{", seqs = "{";
    for (const auto& [id, entry] : cache.chains) {
        if (ids.size() > 1) {
            ids += ',';
            revisions += ',';
            seqs += ',';
        }
        ids += std::to_string(id);
        revisions += std::to_string(entry.revision);
        seqs += std::to_string(entry.seq);
    }
    return db::Params(ids + "}", revisions + "}", seqs + "}");
}

// The column readers of the statement's result, found by name once.
class TickColumns {
public:
    explicit TickColumns(const db::Result& r)
        : chain(r)
        , jobs_ { JobColumns(r, "j0_"), JobColumns(r, "j1_"), JobColumns(r, "j2_") }
        , current_(r, "s0_")
        , next_(r, "s1_")
        , second_(r, "s2_")
        , at_(r.columns(names))
    { }

    bool stale(const db::Result& r, int row) const { return r.boolean(row, at_[Stale]); }

    // A chain's rows that the statement read again.
    LiveChainCache::Entry readEntry(const db::Result& r, int row, int seq) const
    {
        LiveChainCache::Entry entry;
        entry.revision = r.int64(row, at_[Revision]);
        entry.seq = seq;
        entry.rows.trainingDone = r.boolean(row, at_[TrainingDone]);
        entry.rows.newestCheckpointAt = r.optReal(row, at_[NewestAt]);
        entry.rows.newestCheckpointIteration = r.optInt64(row, at_[NewestIteration]);
        entry.rows.newestCheckpointJob = r.optInt64(row, at_[NewestJob]);
        for (const JobColumns& job : jobs_)
            if (job.present(r, row))
                entry.rows.jobs.push_back(job.read(r, row));
        if (current_.present(r, row))
            entry.rows.current = current_.read(r, row);
        if (next_.present(r, row))
            entry.rows.next = next_.read(r, row);
        if (second_.present(r, row))
            entry.rows.second = second_.read(r, row);
        return entry;
    }

    // The signal of a chain's handover, where the chain is in one (a handover without its row: none sent).
    std::optional<HandoverStore::Signal> handoverSignal(const db::Result& r, int row, const ChainRow& chain) const
    {
        if (chain.state != ChainState::Handover)
            return std::nullopt;
        return HandoverStore::Signal { r.optInt64(row, at_[HandoverSignalled]), r.optInt64(row, at_[HandoverSent]),
            static_cast<int>(r.optInt64(row, at_[HandoverAttempts]).value_or(0)) };
    }

    const ChainColumns chain;

private:
    enum Column { Revision, Stale, TrainingDone, NewestAt, NewestIteration, NewestJob, HandoverSignalled,
        HandoverSent, HandoverAttempts, Count };
    static constexpr std::array<std::string_view, Count> names { "revision", "stale", "training_done",
        "newest_checkpoint_unix", "newest_checkpoint_iteration", "newest_checkpoint_job",
        "handover_signalled_unix", "handover_sent_unix", "handover_signal_attempts" };
    JobColumns jobs_[3];
    SubmissionColumns current_, next_, second_;
    std::array<int, Count> at_;
};

} // namespace

std::vector<LiveChain> readLiveChains(db::Connection& connection, LiveChainCache& cache)
{
    std::optional<db::Result> read;
    // A reconnect, before the statement or within it, makes the whole cache unusable.
    while (!read || cache.session != connection.session()) {
        if (cache.session != connection.session()) {
            cache.chains.clear();
            cache.session = connection.session();
        }
        read.emplace(connection.exec(selectTickChains, knownChains(cache)));
    }
    const db::Result& result = *read;
    const TickColumns columns(result);
    std::vector<LiveChain> live;
    live.reserve(static_cast<std::size_t>(result.rows()));
    std::unordered_map<std::int64_t, LiveChainCache::Entry> kept;
    kept.reserve(static_cast<std::size_t>(result.rows()));
    cache.readAgain = 0;
    for (int row = 0; row < result.rows(); ++row) {
        ChainRow chain = columns.chain.read(result, row);
        LiveChainCache::Entry entry;
        if (!columns.stale(result, row)) { // the statement found it in the cache, as it is now
            entry = std::move(cache.chains.at(chain.id));
        } else {
            entry = columns.readEntry(result, row, chain.seq);
            ++cache.readAgain;
        }
        const std::int64_t id = chain.id;
        live.push_back(entry.rows);
        live.back().handoverSignal = columns.handoverSignal(result, row, chain);
        live.back().chain = std::move(chain);
        kept.emplace(id, std::move(entry));
    }
    cache.chains = std::move(kept); // chains that ended are dropped
    return live;
}

} // namespace baton::service
