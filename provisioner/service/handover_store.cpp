#include "handover_store.hpp"

namespace baton::service {

namespace {

constexpr db::Statement insertHandover { "handover_start",
    "INSERT INTO handovers (chain_id, predecessor_seq, predecessor_job_id, successor_job_id, signalled_at)"
    " VALUES ($1, $2, $3, $4, to_timestamp($5)) ON CONFLICT DO NOTHING",
    true };
constexpr db::Statement finishHandover { "handover_complete",
    "UPDATE handovers SET completed_at = to_timestamp($3),"
    " handover_s = greatest(0, $3 - extract(epoch FROM signalled_at))"
    " WHERE chain_id = $1 AND predecessor_seq = $2 AND completed_at IS NULL RETURNING handover_s",
    true };
constexpr db::Statement selectHandoverSignal { "handover_signal",
    "SELECT extract(epoch FROM signalled_at)::bigint AS signalled_unix,"
    " extract(epoch FROM signal_sent_at)::bigint AS sent_unix, signal_attempts FROM handovers"
    " WHERE chain_id = $1 AND predecessor_seq = $2",
    true };
constexpr db::Statement updateHandoverSent { "handover_signal_sent",
    "UPDATE handovers SET signal_sent_at = to_timestamp($3), signal_attempts = signal_attempts + 1"
    " WHERE chain_id = $1 AND predecessor_seq = $2",
    true };

} // namespace

void HandoverStore::start(std::int64_t chainId, int predecessorSeq, std::int64_t predecessor,
    std::int64_t successor, std::int64_t signalledAt)
{
    connection_.exec(
        insertHandover, db::Params(chainId, predecessorSeq, predecessor, successor, signalledAt));
}

std::optional<double> HandoverStore::complete(std::int64_t chainId, int predecessorSeq, std::int64_t endTime)
{
    const db::Result result = connection_.exec(finishHandover, db::Params(chainId, predecessorSeq, endTime));
    if (result.rows() == 0)
        return std::nullopt;
    return result.optReal(0, result.column("handover_s"));
}

HandoverStore::Signal HandoverStore::signal(std::int64_t chainId, int predecessorSeq)
{
    const db::Result r = connection_.exec(selectHandoverSignal, db::Params(chainId, predecessorSeq));
    if (r.rows() == 0)
        return Signal {};
    return Signal { r.optInt64(0, r.column("signalled_unix")), r.optInt64(0, r.column("sent_unix")),
        static_cast<int>(r.int64(0, r.column("signal_attempts"))) };
}

void HandoverStore::recordSignal(std::int64_t chainId, int predecessorSeq, std::int64_t sentAt)
{
    connection_.exec(updateHandoverSent, db::Params(chainId, predecessorSeq, sentAt));
}

} // namespace baton::service
