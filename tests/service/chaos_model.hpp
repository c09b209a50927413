// The pure half of the chaos test (chaos_test.cpp): the seeded fault schedule (chaos_schedule.hpp) and the
// invariant checks, with no cluster, database or clock of their own, so that chaos_model_test.cpp can test
// them alone.
//
// The checks read facts: the jobs slurmctld reports (squeue --states=all with a long MinJobAge), the rows
// of batond's database, the checkpoint directories on disk, batond's own log lines and the replies the
// test's requests got. Each returns the violations it finds; an empty list means the invariant holds.
#pragma once

#include "chaos_schedule.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace baton::chaos {

// ---------------------------------------------------------------------------------------------------
// Facts

// One job as slurmctld reports it (squeue --states=all); times in epoch seconds, 0 when unknown.
struct SlurmJob {
    std::int64_t id = 0;
    std::int64_t uid = -1;
    std::string comment;
    std::string state; // PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, TIMEOUT, FAILED, ...
    std::int64_t submit = 0;
    std::int64_t start = 0;
    std::int64_t end = 0;
    bool ran() const { return start > 0 && (state != "CANCELLED" || end > start || end == 0); }
    bool live() const
    {
        return state == "RUNNING" || state == "COMPLETING" || state == "PENDING" || state == "CONFIGURING"
            || state == "SUSPENDED" || state == "REQUEUED" || state == "RESIZING";
    }
};

// A jobs row of batond's database.
struct DbJob {
    std::int64_t chainId = 0;
    int seq = 0;
    std::int64_t slurmJobId = 0;
};

// A chains row.
struct DbChain {
    std::int64_t id = 0;
    std::int64_t ownerUid = 0;
    std::string name;
    std::string state;
    int seq = 0;
    std::string reason;
    std::string token; // the secret part of every key batond submits with (empty: not known)
};

inline bool isLiveState(const std::string& state)
{
    return state == "running" || state == "successor_pending" || state == "handover";
}

struct Violation {
    std::string invariant;
    std::string subject; // the chain, job or service it is about: with the invariant, the dedup key
    std::string detail;
    double atSeconds = 0;
};

// "baton:<chain id>:<seq>" with anything after a further ':' (a token) ignored.
inline std::optional<std::pair<std::int64_t, int>> parseKey(const std::string& comment)
{
    if (comment.rfind("baton:", 0) != 0)
        return std::nullopt;
    std::istringstream in(comment.substr(6));
    std::string id, seq;
    if (!std::getline(in, id, ':') || !std::getline(in, seq, ':'))
        return std::nullopt;
    if (id.empty() || seq.empty() || id.size() > 18 || seq.size() > 9
        || id.find_first_not_of("0123456789") != std::string::npos
        || seq.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    return std::pair { std::stoll(id), std::stoi(seq) };
}

// The jobs of each chain: those batond recorded for it, and those whose key names it. Only the owner's
// own jobs count as the chain's trainings (a job of another user with a forged key is not one); foreign
// rows are what checkForeignJobs reports.
struct ChainJob {
    const SlurmJob* job = nullptr;
    int seq = -1;
};

inline std::map<std::int64_t, std::vector<ChainJob>> jobsByChain(const std::vector<DbChain>& chains,
    const std::vector<DbJob>& rows, const std::map<std::int64_t, SlurmJob>& slurm)
{
    std::map<std::int64_t, std::int64_t> owner;
    std::map<std::int64_t, std::string> token;
    for (const DbChain& chain : chains) {
        owner[chain.id] = chain.ownerUid;
        token[chain.id] = chain.token;
    }
    std::map<std::int64_t, std::vector<ChainJob>> result;
    std::set<std::int64_t> placed;
    for (const DbJob& row : rows) {
        const auto job = slurm.find(row.slurmJobId);
        if (job == slurm.end() || !owner.contains(row.chainId) || job->second.uid != owner[row.chainId])
            continue;
        result[row.chainId].push_back(ChainJob { &job->second, row.seq });
        placed.insert(row.slurmJobId);
    }
    for (const auto& [id, job] : slurm) {
        if (placed.contains(id))
            continue;
        const auto key = parseKey(job.comment);
        if (!key || !owner.contains(key->first) || owner[key->first] != job.uid)
            continue;
        // Only batond's own key, with the chain's token: a job the owner gave a look-alike comment
        // (baton:<id>:<seq>) is none of the chain's, as batond sees it.
        if (!token[key->first].empty()
            && job.comment
                != "baton:" + std::to_string(key->first) + ":" + std::to_string(key->second) + ":" + token[key->first])
            continue;
        result[key->first].push_back(ChainJob { &job, key->second });
    }
    return result;
}

inline std::string chainLabel(const std::vector<DbChain>& chains, std::int64_t id)
{
    for (const DbChain& chain : chains)
        if (chain.id == id)
            return std::to_string(chain.ownerUid) + "/" + chain.name + "#" + std::to_string(id);
    return "#" + std::to_string(id);
}

// ---------------------------------------------------------------------------------------------------
// Invariants

// Never two trainings of one chain at once, except a predecessor and its successor (adjacent seqs) for
// at most handoverBound seconds. `now` closes the interval of a job still running.
inline std::vector<Violation> checkOverlaps(const std::vector<DbChain>& chains, const std::vector<DbJob>& rows,
    const std::map<std::int64_t, SlurmJob>& slurm, std::int64_t now, std::int64_t handoverBound,
    std::int64_t tolerance = 2)
{
    std::vector<Violation> found;
    for (const auto& [chainId, jobs] : jobsByChain(chains, rows, slurm)) {
        for (std::size_t i = 0; i < jobs.size(); ++i) {
            for (std::size_t k = i + 1; k < jobs.size(); ++k) {
                const SlurmJob& a = *jobs[i].job;
                const SlurmJob& b = *jobs[k].job;
                if (!a.ran() || !b.ran())
                    continue;
                const auto endOf = [now](const SlurmJob& j) {
                    return j.end > 0 && !j.live() ? j.end : std::max(now, j.start);
                };
                const std::int64_t overlap = std::min(endOf(a), endOf(b)) - std::max(a.start, b.start);
                if (overlap <= tolerance)
                    continue;
                const bool adjacent = std::abs(jobs[i].seq - jobs[k].seq) == 1;
                if (adjacent && overlap <= handoverBound)
                    continue;
                found.push_back(Violation { "two_trainings",
                    chainLabel(chains, chainId) + " jobs " + std::to_string(std::min(a.id, b.id)) + "+"
                        + std::to_string(std::max(a.id, b.id)),
                    "jobs " + std::to_string(a.id) + " (seq " + std::to_string(jobs[i].seq) + ", " + a.state
                        + ") and " + std::to_string(b.id) + " (seq " + std::to_string(jobs[k].seq) + ", "
                        + b.state + ") ran together for " + std::to_string(overlap) + " s"
                        + (adjacent ? " (longer than the handover bound of " + std::to_string(handoverBound)
                                    + " s)"
                                    : " (not a predecessor and its successor)") });
            }
        }
    }
    return found;
}

// Never two jobs for one (chain, seq): neither two of the owner's Slurm jobs with one key, nor a job whose
// key names one seq recorded under another.
inline std::vector<Violation> checkDuplicateSeq(
    const std::vector<DbChain>& chains, const std::vector<DbJob>& rows, const std::map<std::int64_t, SlurmJob>& slurm)
{
    std::vector<Violation> found;
    std::map<std::int64_t, std::int64_t> owner;
    std::map<std::int64_t, std::string> token;
    for (const DbChain& chain : chains) {
        owner[chain.id] = chain.ownerUid;
        token[chain.id] = chain.token;
    }
    // A job that ended without running (cancelled while queued) never held the training and gives its
    // seq back: the seq's next submission is the one job for it.
    const auto withdrawn = [](const SlurmJob& job) { return !job.ran() && !job.live(); };
    std::map<std::pair<std::int64_t, int>, std::vector<std::int64_t>> byKey;
    for (const auto& [id, job] : slurm) {
        if (withdrawn(job))
            continue;
        const auto key = parseKey(job.comment);
        if (key && owner.contains(key->first) && owner[key->first] == job.uid)
            byKey[*key].push_back(id);
    }
    for (const auto& [key, ids] : byKey) {
        if (ids.size() < 2)
            continue;
        std::string list;
        for (const auto id : ids) {
            const SlurmJob& job = slurm.at(id);
            list += (list.empty() ? "" : ", ") + std::to_string(id) + " (" + job.state + ")";
        }
        found.push_back(Violation { "duplicate_seq",
            chainLabel(chains, key.first) + " seq " + std::to_string(key.second),
            "Slurm jobs " + list + " all carry the key baton:" + std::to_string(key.first) + ":"
                + std::to_string(key.second) });
    }
    std::map<std::pair<std::int64_t, int>, std::vector<std::int64_t>> rowsByKey;
    for (const DbJob& row : rows) {
        const auto job = slurm.find(row.slurmJobId);
        if (job != slurm.end() && withdrawn(job->second))
            continue;
        rowsByKey[{ row.chainId, row.seq }].push_back(row.slurmJobId);
        if (job == slurm.end())
            continue;
        const auto key = parseKey(job->second.comment);
        if (key && key->first == row.chainId && key->second != row.seq)
            found.push_back(Violation { "duplicate_seq",
                chainLabel(chains, row.chainId) + " job " + std::to_string(row.slurmJobId),
                "job " + std::to_string(row.slurmJobId) + " was submitted for seq " + std::to_string(key->second)
                    + " but is recorded as seq " + std::to_string(row.seq) });
    }
    for (const auto& [key, ids] : rowsByKey)
        if (ids.size() > 1)
            found.push_back(Violation { "duplicate_seq",
                chainLabel(chains, key.first) + " seq " + std::to_string(key.second),
                std::to_string(ids.size()) + " job rows for one seq" });
    return found;
}

// A chain's job rows are its owner's jobs only: another user's job with a forged key is never adopted.
inline std::vector<Violation> checkForeignJobs(
    const std::vector<DbChain>& chains, const std::vector<DbJob>& rows, const std::map<std::int64_t, SlurmJob>& slurm)
{
    std::vector<Violation> found;
    std::map<std::int64_t, std::int64_t> owner;
    std::map<std::int64_t, std::string> token;
    for (const DbChain& chain : chains) {
        owner[chain.id] = chain.ownerUid;
        token[chain.id] = chain.token;
    }
    for (const DbJob& row : rows) {
        const auto job = slurm.find(row.slurmJobId);
        if (job == slurm.end() || !owner.contains(row.chainId) || job->second.uid < 0)
            continue;
        if (job->second.uid != owner[row.chainId])
            found.push_back(Violation { "foreign_job_adopted",
                chainLabel(chains, row.chainId) + " job " + std::to_string(row.slurmJobId),
                "job " + std::to_string(row.slurmJobId) + " of uid " + std::to_string(job->second.uid)
                    + " is recorded as seq " + std::to_string(row.seq) + " of a chain owned by uid "
                    + std::to_string(owner[row.chainId]) });
    }
    return found;
}

// A cancelled chain keeps no job queued or running longer than `bound` seconds after it was seen
// cancelled. cancelledSince: when the test first saw each chain cancelled (and still sees it so).
inline std::vector<Violation> checkCancelledChainsQuiet(const std::vector<DbChain>& chains,
    const std::vector<DbJob>& rows, const std::map<std::int64_t, SlurmJob>& slurm,
    const std::map<std::int64_t, std::int64_t>& cancelledSince, std::int64_t now, std::int64_t bound)
{
    std::vector<Violation> found;
    const auto byChain = jobsByChain(chains, rows, slurm);
    for (const DbChain& chain : chains) {
        const auto since = cancelledSince.find(chain.id);
        if (chain.state != "cancelled" || since == cancelledSince.end() || now - since->second <= bound)
            continue;
        const auto jobs = byChain.find(chain.id);
        if (jobs == byChain.end())
            continue;
        for (const ChainJob& job : jobs->second) {
            // Still live, or ended well after the chain was cancelled.
            const bool live = job.job->live();
            const bool lateEnd = !live && job.job->end > since->second + bound;
            if (live || lateEnd)
                found.push_back(Violation { "cancelled_chain_job_runs",
                    chainLabel(chains, chain.id) + " job " + std::to_string(job.job->id),
                    "job " + std::to_string(job.job->id) + " (seq " + std::to_string(job.seq) + ") is "
                        + job.job->state + (lateEnd ? " and ended at " + std::to_string(job.job->end) : "")
                        + ", " + std::to_string(now - since->second) + " s after the chain was cancelled" });
        }
    }
    return found;
}

// Closed intervals [start, end] in seconds of the test's clock during which a service was away
// (end = +inf while it still is).
struct Outage {
    double start = 0;
    double end = 1e18;
    std::string what;
};

// Seconds of [from, to] covered by the outages, each stretched by `grace` at its end.
inline double outageSecondsWithin(const std::vector<Outage>& outages, double from, double to, double grace)
{
    double covered = 0;
    for (const Outage& outage : outages) {
        const double a = std::max(from, outage.start);
        const double b = std::min(to, outage.end + grace);
        if (b > a)
            covered += b - a;
    }
    return covered;
}

inline bool duringOutage(const std::vector<Outage>& outages, double at, double grace)
{
    for (const Outage& outage : outages)
        if (at >= outage.start && at <= outage.end + grace)
            return true;
    return false;
}

// Progress: every chain in a live state (running, successor_pending, handover) makes progress (its
// newest checkpoint iteration on disk or in the database grows, or its seq does) within `bound`
// seconds, plus the outage time in between. A chain that is not live (paused, cancelled, finished,
// failed, or any quarantine state) is not expected to; its clock restarts when it is live again.
struct ProgressMarker {
    std::int64_t iteration = -1; // newest checkpoint iteration known (disk or database)
    int seq = -1;
    bool operator==(const ProgressMarker&) const = default;
};

class ProgressTracker {
public:
    // One observation of a chain at `at` seconds; returns a violation when the chain stalled.
    std::optional<Violation> observe(const DbChain& chain, const ProgressMarker& marker, double at,
        double bound, const std::vector<Outage>& outages, double outageGrace)
    {
        State& s = states_[chain.id];
        const bool live = isLiveState(chain.state);
        if (!s.seen || !live || !s.live || marker.iteration > s.marker.iteration || marker.seq > s.marker.seq) {
            s.since = at;
            s.reported = false;
        }
        s.seen = true;
        s.live = live;
        s.marker.iteration = std::max(s.marker.iteration, marker.iteration);
        s.marker.seq = std::max(s.marker.seq, marker.seq);
        if (!live || s.reported)
            return std::nullopt;
        const double stalled = at - s.since;
        const double allowed = bound + outageSecondsWithin(outages, s.since, at, outageGrace);
        if (stalled <= allowed)
            return std::nullopt;
        s.reported = true;
        std::ostringstream detail;
        detail << "no progress for " << static_cast<long long>(stalled) << " s (allowed "
               << static_cast<long long>(allowed) << " s) while " << chain.state << ": newest checkpoint iteration "
               << s.marker.iteration << ", seq " << s.marker.seq
               << (chain.reason.empty() ? "" : ", reason '" + chain.reason + "'");
        return Violation { "no_progress",
            std::to_string(chain.ownerUid) + "/" + chain.name + "#" + std::to_string(chain.id) + " since "
                + std::to_string(static_cast<long long>(s.since)),
            detail.str() };
    }

private:
    struct State {
        bool seen = false;
        bool live = false;
        bool reported = false;
        double since = 0;
        ProgressMarker marker;
    };
    std::map<std::int64_t, State> states_;
};

// A tick failing as a whole (batond's loop logs "database: ...", "slurm: ..." or "tick: ...", or it
// cannot read the leader lock, or a tick failure counter grows) is allowed only while PostgreSQL or
// slurmctld is away (and `grace` after), or for a lost connection.
struct TickFailure {
    double at = 0;
    std::string instance;
    std::string line;
};

// Whether a failure says the connection itself was lost (the one cause the issue allows to fail a tick
// as a whole, e.g. a standby's session that died with a PostgreSQL restart and is noticed when it takes
// over), as opposed to an error about data (a constraint, a value out of range, a parse error).
inline bool isConnectionFailure(const std::string& line)
{
    std::string lower;
    for (const char c : line)
        lower.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
    for (const char* phrase : { "lost the database connection", "cannot connect", "could not connect",
             "server closed the connection", "terminating connection", "connection refused", "timed out",
             "unable to contact", "not responding", "connection reset" })
        if (lower.find(phrase) != std::string::npos)
            return true;
    return false;
}

inline std::vector<Violation> checkTickFailures(
    const std::vector<TickFailure>& failures, const std::vector<Outage>& outages, double grace)
{
    std::vector<Violation> found;
    for (const TickFailure& failure : failures) {
        if (duringOutage(outages, failure.at, grace) || isConnectionFailure(failure.line))
            continue;
        // One violation per instance and message: a tick that fails again the same way every second is
        // one finding, not hundreds.
        // (numbers, e.g. the retry backoff, do not make another finding)
        std::string message;
        for (const char c : failure.line.substr(0, 100)) {
            const bool digit = c >= '0' && c <= '9';
            if (!digit || message.empty() || message.back() != '#')
                message.push_back(digit ? '#' : c);
        }
        found.push_back(Violation { "tick_failed", failure.instance + ": " + message,
            "at t+" + std::to_string(static_cast<long long>(failure.at)) + "s: " + failure.line, failure.at });
    }
    return found;
}

// Whether a batond log line is the loop's report of a tick that failed as a whole.
inline bool isTickFailureLine(const std::string& line)
{
    for (const char* prefix : { "<3>error: database: ", "<3>error: slurm: ", "<3>error: tick: ",
             "<4>warning: leader lock: " })
        if (line.rfind(prefix, 0) == 0)
            return true;
    return false;
}

// Every request the test made got an answer: a success, or a refusal with a status and a message
// ({"error": "..."} from the API, a message and batonctl's documented exit status from the CLI). No
// answer, a 500 (an unhandled error), or a 503 when nothing was down is a violation; so is the success
// of an input that must be refused (mustRefuse).
struct Reply {
    double at = 0;
    std::string what; // e.g. "alice pause chain-3 (http)"
    bool cli = false;
    int status = 0; // HTTP status, or batonctl's exit status when cli
    std::string body; // the reply body, or batonctl's output
    bool mustRefuse = false;
};

inline bool hasErrorMessage(const std::string& body)
{
    const auto key = body.find("\"error\"");
    if (key == std::string::npos)
        return false;
    const auto colon = body.find(':', key);
    const auto quote = colon == std::string::npos ? std::string::npos : body.find('"', colon);
    return quote != std::string::npos && quote + 1 < body.size() && body[quote + 1] != '"';
}

inline std::vector<Violation> checkReplies(const std::vector<Reply>& replies, const std::vector<Outage>& outages, double grace)
{
    std::vector<Violation> found;
    for (const Reply& reply : replies) {
        const bool down = duringOutage(outages, reply.at, grace);
        std::string problem;
        if (reply.cli) {
            // batonctl: 0 ok, 1 failed (server error, unreachable), 2 usage, 3 not found, 4 denied, 5 conflict.
            const bool clear = reply.status == 0 || reply.status == 3 || reply.status == 4 || reply.status == 5;
            if (reply.mustRefuse && reply.status == 0)
                problem = "accepted an input that must be refused";
            else if (!clear && !(reply.status == 1 && down && !reply.body.empty()))
                problem = "batonctl exited " + std::to_string(reply.status);
        } else {
            const bool ok = reply.status >= 200 && reply.status < 300;
            if (reply.mustRefuse && ok)
                problem = "accepted an input that must be refused (HTTP " + std::to_string(reply.status) + ")";
            else if (reply.mustRefuse && reply.status >= 500 && !down)
                problem = "refused with a server error (HTTP " + std::to_string(reply.status)
                    + ") instead of a client error";
            else if (reply.status == 0 && !down)
                problem = "no answer";
            else if (reply.status == 500)
                problem = "internal server error";
            else if (reply.status == 503 && !down)
                problem = "503 while every service was up";
            else if (!ok && reply.status != 0 && !hasErrorMessage(reply.body))
                problem = "refused without an error message (HTTP " + std::to_string(reply.status) + ")";
        }
        if (problem.empty())
            continue;
        std::ostringstream subject;
        subject << reply.what << " at t+" << static_cast<long long>(reply.at);
        found.push_back(Violation { "unclear_refusal", subject.str(),
            problem + ": " + (reply.cli ? "exit " : "HTTP ") + std::to_string(reply.status) + " "
                + reply.body.substr(0, 300),
            reply.at });
    }
    return found;
}

// A chain that was not asked to pause (nor had its running job cancelled by its owner) is not found
// paused, unless batond quarantined it for an input of its own with a reason. `expected` is the test's
// record of what it asked; `hostile` the chains it fed a hostile input.
inline std::optional<Violation> checkUnrequestedPause(
    const DbChain& chain, bool pauseExpected, bool hostile, double at)
{
    if (chain.state != "paused" || pauseExpected)
        return std::nullopt;
    if (hostile && !chain.reason.empty())
        return std::nullopt;
    return Violation { "unrequested_pause",
        std::to_string(chain.ownerUid) + "/" + chain.name + "#" + std::to_string(chain.id),
        "paused without a pause request or a cancelled running job; reason '" + chain.reason + "'", at };
}

// ---------------------------------------------------------------------------------------------------
// What the jobs say (tests/spank_plugin/ckpt_chain_job.cpp's lines in each job's output)

struct JobOutput {
    bool restored = false;
    std::uint64_t restoredIteration = 0;
    bool restoredIntact = true; // every restored word is what that iteration wrote
    bool restoredNodeLocal = false; // from the node-local level, not the chain directory
    std::vector<std::int64_t> finalCheckpoints; // epoch seconds at which each final checkpoint committed
};

inline JobOutput parseJobOutput(const std::string& text)
{
    JobOutput output;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string a, b, c, d, e;
        words >> a >> b >> c >> d >> e;
        if (a == "restored" && b == "iteration" && c.find_first_not_of("0123456789") == std::string::npos
            && !c.empty() && c.size() <= 19) {
            output.restored = true;
            output.restoredIteration = std::stoull(c);
            output.restoredIntact = d == "verified";
        } else if (a == "restored" && b == "from") {
            output.restoredNodeLocal = line.find("node-local") != std::string::npos;
        } else if (a == "final" && b == "checkpoint" && e == "committed") {
            std::string at, when;
            words >> at >> when;
            if (at == "at" && !when.empty() && when.size() <= 18
                && when.find_first_not_of("0123456789") == std::string::npos)
                output.finalCheckpoints.push_back(std::stoll(when));
        }
    }
    return output;
}

// No job restores bytes that its own chain did not write: nothing corrupt, nothing at an iteration that
// only a checkpoint another user planted has (foreignFloor and above), and nothing from a node-local
// level for an owner whose node-local directory another user made (the plugin must not offer it).
inline std::vector<Violation> checkRestores(const std::map<std::int64_t, JobOutput>& outputs,
    const std::map<std::int64_t, SlurmJob>& slurm, const std::set<std::int64_t>& preparedByAnotherUid,
    std::uint64_t foreignFloor)
{
    std::vector<Violation> found;
    for (const auto& [jobId, output] : outputs) {
        if (!output.restored)
            continue;
        const auto job = slurm.find(jobId);
        const std::int64_t uid = job == slurm.end() ? -1 : job->second.uid;
        const std::string subject = "job " + std::to_string(jobId);
        const std::string what = "restored iteration " + std::to_string(output.restoredIteration) + " from the "
            + (output.restoredNodeLocal ? "node-local level" : "chain directory");
        if (!output.restoredIntact)
            found.push_back(Violation { "restore_corrupt", subject, what + ", and its bytes are not that iteration's" });
        if (output.restoredIteration >= foreignFloor)
            found.push_back(Violation { "foreign_bytes_restored", subject,
                what + ": a checkpoint another user planted (iterations from " + std::to_string(foreignFloor) + ")" });
        else if (output.restoredNodeLocal && preparedByAnotherUid.contains(uid))
            found.push_back(Violation { "foreign_bytes_restored", subject,
                what + ", in a node-local directory that another user made for uid " + std::to_string(uid) });
    }
    return found;
}

// An interval in epoch seconds in which batond, or a service it needs, was away (uid -1), or in which one
// owner's Slurm calls were stopped on purpose (uid set): that owner's handovers may be late then, no
// other owner's.
struct Disturbance {
    double start = 0;
    double end = 1e18;
    std::int64_t uid = -1;
    std::string what;
};

// The handover bound across owners: once a successor starts, its running predecessor is told to hand over
// (SIGTERM: it commits a final checkpoint) within `bound` seconds, or it ends within them, whatever
// another owner's calls do. Handovers that a disturbance of the service (or of their own owner's calls)
// overlaps, stretched by `grace`, are not judged, nor those of a chain that is not live when they are.
// judged: each handover judged and within the bound, by its predecessor's job id, for the summary.
struct JudgedHandover {
    std::int64_t ownerUid = 0;
    std::int64_t successorStart = 0; // epoch seconds
    double seconds = 0; // from the successor's start to the predecessor's final checkpoint or end
};

inline std::vector<Violation> checkHandoverTerms(const std::vector<DbChain>& chains, const std::vector<DbJob>& rows,
    const std::map<std::int64_t, SlurmJob>& slurm, const std::map<std::int64_t, JobOutput>& outputs,
    const std::vector<Disturbance>& disturbances, std::int64_t now, std::int64_t bound, double grace,
    std::map<std::int64_t, JudgedHandover>* judged = nullptr)
{
    std::vector<Violation> found;
    std::set<std::int64_t> live;
    for (const DbChain& chain : chains)
        if (isLiveState(chain.state))
            live.insert(chain.id);
    for (const auto& [chainId, jobs] : jobsByChain(chains, rows, slurm)) {
        if (!live.contains(chainId))
            continue; // paused (a running successor is then let be, and its predecessor runs on), or ended
        for (const ChainJob& succ : jobs) {
            const SlurmJob& s = *succ.job;
            if (s.start <= 0 || now < s.start + bound)
                continue;
            for (const ChainJob& pred : jobs) {
                const SlurmJob& p = *pred.job;
                if (pred.seq != succ.seq - 1 || p.start <= 0 || p.start >= s.start
                    || (p.end > 0 && p.end <= s.start))
                    continue;
                const auto output = outputs.find(p.id);
                if (output == outputs.end())
                    continue; // no output to read (yet): nothing to judge by
                const double from = static_cast<double>(s.start) - 5;
                const double to = static_cast<double>(s.start + bound);
                const bool disturbed = std::any_of(disturbances.begin(), disturbances.end(),
                    [&](const Disturbance& d) {
                        return (d.uid < 0 || d.uid == p.uid) && d.start <= to && d.end + grace >= from;
                    });
                if (disturbed)
                    continue;
                std::optional<std::int64_t> told;
                for (const std::int64_t at : output->second.finalCheckpoints)
                    if (at >= s.start - 2 && (!told || at < *told))
                        told = at;
                if (p.end > 0 && (!told || p.end < *told))
                    told = p.end;
                if (told && *told <= s.start + bound) {
                    if (judged)
                        (*judged)[p.id] = JudgedHandover { p.uid, s.start,
                            static_cast<double>(std::max<std::int64_t>(0, *told - s.start)) };
                    continue;
                }
                found.push_back(Violation { "handover_term_late", chainLabel(chains, chainId),
                    "job " + std::to_string(p.id) + " (seq " + std::to_string(pred.seq) + ") had no final checkpoint "
                        + "and was still running " + std::to_string(bound) + " s after its successor "
                        + std::to_string(s.id) + " started" });
            }
        }
    }
    return found;
}

// A refused POST /v1/chains changes nothing: no chain of that owner and name appears (or, where one
// existed already, it is not made live by the refused request). refused: (owner uid, name) of each
// refused creation with whether a chain of that name existed before it.
struct RefusedCreation {
    std::int64_t ownerUid = 0;
    std::string name;
    double at = 0;
    std::string what;
};

inline std::vector<Violation> checkRefusedCreations(
    const std::vector<DbChain>& chains, const std::vector<RefusedCreation>& refused)
{
    std::vector<Violation> found;
    for (const RefusedCreation& creation : refused)
        for (const DbChain& chain : chains)
            if (chain.ownerUid == creation.ownerUid && chain.name == creation.name)
                found.push_back(Violation { "refused_input_changed_state",
                    std::to_string(chain.ownerUid) + "/" + chain.name + "#" + std::to_string(chain.id),
                    creation.what + " was refused, yet chain " + chain.name + " exists (" + chain.state + ", seq "
                        + std::to_string(chain.seq) + ")",
                    creation.at });
    return found;
}

} // namespace baton::chaos
