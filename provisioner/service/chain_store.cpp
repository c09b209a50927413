#include "chain_store.hpp"

#include "db/errors.hpp"

#include <string_view>

namespace baton::service {

using Json = nlohmann::json;

namespace {

constexpr char withSpec[] = ", coalesce(c.spec, 'null'::jsonb) AS spec FROM chains c";
constexpr auto chainByIdSql = db::joinSql(chainColumns, withSpec, " WHERE id = $1");
constexpr auto chainByKeySql = db::joinSql(chainColumns, withSpec, " WHERE owner_uid = $1 AND name = $2");
constexpr auto chainListSql = db::joinSql(chainColumns, withSpec,
    " WHERE ($1::bigint IS NULL OR owner_uid = $1) AND ($2::text IS NULL OR state = $2)"
    " AND id > $3 ORDER BY id LIMIT $4");
// The cancelled chains that may still have jobs, with the jobs and keys of their current and next seqs
// (seq + 2: a second successor).
constexpr auto toWithdrawSql = db::joinSql(chainColumns,
    ", coalesce((SELECT array_agg(DISTINCT x) FROM (SELECT slurm_job_id AS x FROM jobs"
    " WHERE chain_id = c.id AND seq BETWEEN c.seq AND c.seq + 2 UNION ALL SELECT slurm_job_id"
    " FROM submissions WHERE chain_id = c.id AND seq BETWEEN c.seq AND c.seq + 2"
    " AND slurm_job_id IS NOT NULL) j),"
    " '{}')::text AS job_ids, coalesce((SELECT array_agg(idempotency_key) FROM submissions"
    " WHERE chain_id = c.id AND seq BETWEEN c.seq AND c.seq + 2), '{}')::text AS keys"
    " FROM chains c WHERE c.withdraw_jobs ORDER BY c.id");

constexpr db::Statement insertChain { "chain_insert",
    "INSERT INTO chains (owner_uid, owner_name, name, chain_dir, spec, policy, state) VALUES ($1, $2, $3,"
    " $4, $5, $6, 'running') ON CONFLICT (owner_uid, name) DO NOTHING" };
constexpr db::Statement selectChainById { "chain_by_id", chainByIdSql.data(), true };
constexpr db::Statement selectChainByKey { "chain_by_key", chainByKeySql.data(), true };
constexpr db::Statement selectChains { "chain_list", chainListSql.data(), true };
constexpr db::Statement countLive { "chain_count_live",
    "SELECT count(*) FROM chains WHERE owner_uid = $1 AND state NOT IN ('finished', 'failed', 'cancelled')", true };
constexpr db::Statement selectSpec { "chain_spec",
    "SELECT coalesce(spec, 'null'::jsonb) AS spec FROM chains WHERE id = $1", true };
// Every change of a chain's state is fenced on the state and seq its writer read: a write made from a
// stale view (a pause or cancel came in between, another instance advanced the chain) changes nothing.
constexpr db::Statement transitionChain { "chain_transition",
    "UPDATE chains SET state = $2, reason = coalesce($4, reason), updated_at = now()"
    " WHERE id = $1 AND state = $3 AND seq = $5" };
constexpr db::Statement advanceChain { "chain_advance",
    "UPDATE chains SET seq = $2 + 1, state = $3, updated_at = now() WHERE id = $1 AND seq = $2 AND state = $4" };
// A chain that runs again (a resubmitted or re-created ended chain) continues after the highest seq any
// of its jobs or submissions ever had, so that its next job never takes a seq that is already used.
constexpr db::Statement restartChain { "chain_restart",
    "UPDATE chains c SET seq = greatest(c.seq, coalesce((SELECT max(x) + 1 FROM ("
    " SELECT seq AS x FROM jobs WHERE chain_id = c.id"
    " UNION ALL SELECT seq FROM submissions WHERE chain_id = c.id) used), 0)),"
    " state = 'running', retries = 0, resubmit_requested = false, reason = $4,"
    " spec = coalesce($5, spec), updated_at = now()"
    " WHERE id = $1 AND state = $2 AND seq = $3 RETURNING seq",
    true };
// A chain that runs again trains again: its earlier checkpoints no longer end it (their own manifests still
// say what they said, for the training program that restores one).
constexpr db::Statement forgetTrainingDone { "chain_forget_training_done",
    "UPDATE checkpoints SET training_done = false WHERE chain_id = $1 AND training_done", true };
constexpr db::Statement updateRetries { "chain_retries", "UPDATE chains SET retries = $2 WHERE id = $1", true };
constexpr db::Statement updateLastHandoverSeq { "chain_last_handover_seq",
    "UPDATE chains SET last_handover_seq = $2 WHERE id = $1", true };
constexpr db::Statement updateResubmit { "chain_resubmit",
    "UPDATE chains SET resubmit_requested = $2, updated_at = now() WHERE id = $1", true };
constexpr db::Statement updatePreempt { "chain_preempt",
    "UPDATE chains SET preempt_requested = $2 WHERE id = $1 AND preempt_requested IS DISTINCT FROM $2", true };
constexpr db::Statement updateChainDir { "chain_dir",
    "UPDATE chains SET chain_dir = $2 WHERE id = $1 AND chain_dir IS DISTINCT FROM $2", true };
constexpr db::Statement updatePolicy { "chain_policy",
    "UPDATE chains SET policy = $2, updated_at = now() WHERE id = $1", true };
constexpr db::Statement selectChainsToWithdraw { "chain_to_withdraw", toWithdrawSql.data(), true };
constexpr db::Statement updateWithdrawJobs { "chain_withdraw_jobs",
    "UPDATE chains SET withdraw_jobs = $2 WHERE id = $1 AND withdraw_jobs IS DISTINCT FROM $2", true };
constexpr db::Statement deleteUnstartedChain { "chain_delete_unstarted",
    "DELETE FROM chains c WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM jobs WHERE chain_id = c.id)"
    " AND NOT EXISTS (SELECT 1 FROM submissions WHERE chain_id = c.id AND slurm_job_id IS NOT NULL)",
    true };
// With the highest chain id given so far, in the same statement: one row even without live chains.
constexpr db::Statement selectLiveStates { "chain_live_states",
    "SELECT top.max_id, c.id, c.state FROM (SELECT coalesce(max(id), 0) AS max_id FROM chains) top"
    " LEFT JOIN (SELECT id, state FROM chains WHERE state NOT IN ('finished', 'failed', 'cancelled')) c"
    " ON true ORDER BY c.id",
    true };
constexpr db::Statement selectEndedCounts { "chain_ended_counts",
    "SELECT state, count(*) AS chains FROM chains WHERE state IN ('finished', 'failed', 'cancelled')"
    " GROUP BY state",
    true };

ChainState stateOf(std::string_view name)
{
    return chainStateFromName(name).value_or(ChainState::Failed);
}

// The elements of a one-dimensional PostgreSQL array's text form ({a,b}); keys and ids have no quotes,
// commas or braces.
std::vector<std::string> arrayElements(std::string_view text)
{
    std::vector<std::string> items;
    if (text.size() < 2)
        return items;
    text = text.substr(1, text.size() - 2);
    while (!text.empty()) {
        const auto comma = text.find(',');
        items.emplace_back(text.substr(0, comma));
        if (comma == std::string_view::npos)
            break;
        text.remove_prefix(comma + 1);
    }
    return items;
}

} // namespace

ChainColumns::ChainColumns(const db::Result& r)
    : at_(r.columns(names))
    , spec_(PQfnumber(r.get(), "spec"))
{ }

ChainRow ChainColumns::read(const db::Result& r, int row) const
{
    ChainRow chain;
    chain.id = r.int64(row, at_[Id]);
    chain.ownerUid = r.int64(row, at_[OwnerUid]);
    chain.ownerName = std::string(r.text(row, at_[OwnerName]));
    chain.name = std::string(r.text(row, at_[Name]));
    chain.state = stateOf(r.text(row, at_[State]));
    chain.seq = static_cast<int>(r.int64(row, at_[Seq]));
    chain.lastHandoverSeq = static_cast<int>(r.int64(row, at_[LastHandoverSeq]));
    chain.retries = static_cast<int>(r.int64(row, at_[Retries]));
    chain.reason = r.optText(row, at_[Reason]);
    if (spec_ >= 0)
        chain.spec = r.json(row, spec_);
    chain.chainDir = r.optText(row, at_[ChainDir]);
    chain.resubmitRequested = r.boolean(row, at_[Resubmit]);
    chain.preemptRequested = r.boolean(row, at_[Preempt]);
    chain.updatedAt = r.int64(row, at_[Updated]);
    chain.token = std::string(r.text(row, at_[Token]));
    chain.policy = r.optText(row, at_[Policy]);
    return chain;
}

namespace {

std::optional<ChainRow> firstChain(const db::Result& result)
{
    if (result.rows() == 0)
        return std::nullopt;
    return ChainColumns(result).read(result, 0);
}

} // namespace

ChainRow ChainStore::create(std::int64_t ownerUid, const std::string& ownerName, const std::string& name,
    const std::optional<std::string>& chainDir, const Json& spec, const std::optional<std::string>& policy)
{
    connection_.exec(insertChain, db::Params(ownerUid, ownerName, name, chainDir, spec, policy));
    auto created = find(ownerUid, name);
    if (!created)
        throw db::DbError("chain " + name + " vanished right after it was created");
    return *created;
}

std::optional<ChainRow> ChainStore::find(std::int64_t id)
{
    return firstChain(connection_.exec(selectChainById, db::Params(id)));
}

std::optional<ChainRow> ChainStore::find(std::int64_t ownerUid, const std::string& name)
{
    return firstChain(connection_.exec(selectChainByKey, db::Params(ownerUid, name)));
}

std::int64_t ChainStore::liveCount(std::int64_t ownerUid)
{
    return connection_.exec(countLive, db::Params(ownerUid)).int64(0, 0);
}

std::vector<ChainRow> ChainStore::list(std::optional<std::int64_t> ownerUid, std::optional<ChainState> state,
    std::int64_t afterId, std::int64_t limit)
{
    std::optional<std::string> stateName;
    if (state)
        stateName = std::string(nameOf(*state));
    const db::Result result = connection_.exec(selectChains, db::Params(ownerUid, stateName, afterId, limit));
    const ChainColumns columns(result);
    return result.all([&](const db::Result& r, int row) { return columns.read(r, row); });
}

Json ChainStore::spec(std::int64_t chainId)
{
    const db::Result result = connection_.exec(selectSpec, db::Params(chainId));
    return result.rows() == 0 ? Json() : result.json(0, result.column("spec"));
}

bool ChainStore::transition(const ChainRow& chain, ChainEvent event, const std::optional<std::string>& reason)
{
    const auto to = nextState(chain.state, event);
    if (!to)
        return false;
    return connection_
               .exec(transitionChain, db::Params(chain.id, nameOf(*to), nameOf(chain.state), reason, chain.seq))
               .affected()
        == 1;
}

bool ChainStore::advance(const ChainRow& chain, ChainEvent event)
{
    const auto to = nextState(chain.state, event);
    if (!to)
        return false;
    return connection_.exec(advanceChain, db::Params(chain.id, chain.seq, nameOf(*to), nameOf(chain.state)))
               .affected()
        == 1;
}

std::optional<int> ChainStore::restart(
    const ChainRow& chain, ChainEvent event, const std::string& reason, const std::optional<Json>& spec)
{
    if (!isTerminal(chain.state) || nextState(chain.state, event) != ChainState::Running)
        return std::nullopt;
    const db::Result result
        = connection_.exec(restartChain, db::Params(chain.id, nameOf(chain.state), chain.seq, reason, spec));
    if (result.rows() == 0)
        return std::nullopt;
    connection_.exec(forgetTrainingDone, db::Params(chain.id));
    return static_cast<int>(result.int64(0, result.column("seq")));
}

bool ChainStore::deleteUnstarted(std::int64_t chainId)
{
    return connection_.exec(deleteUnstartedChain, db::Params(chainId)).affected() == 1;
}

void ChainStore::setRetries(std::int64_t chainId, int retries)
{
    connection_.exec(updateRetries, db::Params(chainId, retries));
}

void ChainStore::setLastHandoverSeq(std::int64_t chainId, int seq)
{
    connection_.exec(updateLastHandoverSeq, db::Params(chainId, seq));
}

void ChainStore::setResubmitRequested(std::int64_t chainId, bool requested)
{
    connection_.exec(updateResubmit, db::Params(chainId, requested));
}

void ChainStore::setPreemptRequested(std::int64_t chainId, bool requested)
{
    connection_.exec(updatePreempt, db::Params(chainId, requested));
}

void ChainStore::setChainDir(std::int64_t chainId, const std::string& dir)
{
    connection_.exec(updateChainDir, db::Params(chainId, dir));
}

void ChainStore::setPolicy(std::int64_t chainId, const std::optional<std::string>& policy)
{
    connection_.exec(updatePolicy, db::Params(chainId, policy));
}

std::vector<ChainStore::ToWithdraw> ChainStore::toWithdraw()
{
    const db::Result result = connection_.exec(selectChainsToWithdraw);
    const ChainColumns columns(result);
    const int jobIds = result.column("job_ids"), keys = result.column("keys");
    return result.all([&](const db::Result& r, int row) {
        ToWithdraw withdraw { columns.read(r, row), {}, arrayElements(r.text(row, keys)) };
        for (const std::string& id : arrayElements(r.text(row, jobIds)))
            withdraw.jobIds.push_back(std::stoll(id));
        return withdraw;
    });
}

void ChainStore::setWithdrawJobs(std::int64_t chainId, bool withdraw)
{
    connection_.exec(updateWithdrawJobs, db::Params(chainId, withdraw));
}

ChainStore::LiveStates ChainStore::liveStates()
{
    const db::Result result = connection_.exec(selectLiveStates);
    const int maxId = result.column("max_id"), id = result.column("id"), state = result.column("state");
    LiveStates states;
    states.chains.reserve(static_cast<std::size_t>(result.rows()));
    for (int row = 0; row < result.rows(); ++row) {
        states.maxChainId = result.int64(row, maxId);
        if (!result.isNull(row, id))
            states.chains.emplace_back(result.int64(row, id), stateOf(result.text(row, state)));
    }
    return states;
}

std::vector<std::pair<ChainState, std::int64_t>> ChainStore::endedCounts()
{
    const db::Result result = connection_.exec(selectEndedCounts);
    const int state = result.column("state"), chains = result.column("chains");
    return result.all([&](const db::Result& r, int row) {
        return std::pair { stateOf(r.text(row, state)), r.int64(row, chains) };
    });
}

} // namespace baton::service
