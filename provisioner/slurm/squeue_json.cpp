#include "squeue_json.hpp"

#include "json_scanner.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <iterator>
#include <limits>
#include <thread>
#include <utility>

namespace baton::slurm {

namespace {

using detail::Scanner;

template<class T> T narrow(Scanner& s, std::optional<std::int64_t> v, std::string_view field)
{
    if (!v)
        return T {};
    if (*v < static_cast<std::int64_t>(std::numeric_limits<T>::min())
        || *v > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
        s.fail("field " + std::string(field) + " out of range");
    return static_cast<T>(*v);
}

void readState(Scanner& s, std::string& out)
{
    // Later releases give a list of states ("RUNNING", "COMPLETING"...); the first is the base state.
    if (s.peek() != '[') {
        s.readString(out);
        return;
    }
    out.clear();
    s.array([&] {
        std::string one;
        s.readString(one);
        if (out.empty())
            out = std::move(one);
    });
}

void readExitCode(Scanner& s, QueueJob& job)
{
    if (s.peek() == '{') {
        // 23.02 and later: {"status": [...], "return_code": N, "signal": {"id": N, "name": "TERM"}},
        // each number a {"set", "infinite", "number"} object (unset where it does not apply).
        std::optional<std::int64_t> code, signal;
        s.object([&](std::string_view key) {
            if (key == "return_code")
                code = s.readInteger();
            else if (key == "signal" && s.peek() == '{')
                s.object([&](std::string_view signalKey) {
                    if (signalKey == "id")
                        signal = s.readInteger();
                    else
                        s.skipValue();
                });
            else
                s.skipValue();
        });
        job.exitSignal = signal.value_or(0) > 0 && *signal < 128 ? static_cast<std::int32_t>(*signal) : 0;
        job.exitStatus = job.exitSignal == 0 && code ? static_cast<std::int32_t>(*code & 0xFF) : 0;
        return;
    }
    // 22.05 reports the raw wait status of the batch script.
    const auto raw = s.readInteger().value_or(0);
    const auto status = static_cast<std::uint32_t>(raw);
    if ((status & 0x7F) == 0) {
        job.exitStatus = static_cast<std::int32_t>((status >> 8) & 0xFF);
        job.exitSignal = 0;
    } else {
        job.exitStatus = 0;
        job.exitSignal = static_cast<std::int32_t>(status & 0x7F);
    }
}

// The members of a job that this reader keeps; all others are skipped.
enum class JobField : std::uint8_t {
    Other,
    Account,
    ArrayJobId,
    ArrayTaskId,
    ArrayTaskString,
    Batch,
    Comment,
    Workdir,
    EndTime,
    ExitCode,
    Features,
    GroupId,
    JobId,
    JobState,
    Name,
    NodeCount,
    Nodes,
    Priority,
    Partition,
    Qos,
    CpusPerTask,
    MemoryPerCpu,
    MemoryPerNode,
    Tasks,
    TasksPerNode,
    TresPerNode,
    SubmitTime,
    EligibleTime,
    StartTime,
    StateReason,
    TimeLimit,
    UserId,
    UserName,
};

JobField jobFieldOf(std::string_view key)
{
    static constexpr std::pair<std::string_view, JobField> fields[] = {
        { "account", JobField::Account },
        { "array_job_id", JobField::ArrayJobId },
        { "array_task_id", JobField::ArrayTaskId },
        { "array_task_string", JobField::ArrayTaskString },
        { "batch_flag", JobField::Batch },
        { "comment", JobField::Comment },
        { "current_working_directory", JobField::Workdir },
        { "eligible_time", JobField::EligibleTime },
        { "end_time", JobField::EndTime },
        { "cpus_per_task", JobField::CpusPerTask },
        { "exit_code", JobField::ExitCode },
        { "features", JobField::Features },
        { "group_id", JobField::GroupId },
        { "job_id", JobField::JobId },
        { "job_state", JobField::JobState },
        { "name", JobField::Name },
        { "node_count", JobField::NodeCount },
        { "nodes", JobField::Nodes },
        { "memory_per_cpu", JobField::MemoryPerCpu },
        { "memory_per_node", JobField::MemoryPerNode },
        { "priority", JobField::Priority },
        { "partition", JobField::Partition },
        { "qos", JobField::Qos },
        { "tasks", JobField::Tasks },
        { "tasks_per_node", JobField::TasksPerNode },
        { "tres_per_node", JobField::TresPerNode },
        { "submit_time", JobField::SubmitTime },
        { "start_time", JobField::StartTime },
        { "state_reason", JobField::StateReason },
        { "time_limit", JobField::TimeLimit },
        { "user_id", JobField::UserId },
        { "user_name", JobField::UserName },
    };
    for (const auto& [name, field] : fields)
        if (name == key)
            return field;
    return JobField::Other;
}

void readJobField(Scanner& s, QueueJob& job, JobField field, std::string_view key)
{
    auto integer
        = [&](auto& out) { out = narrow<std::remove_reference_t<decltype(out)>>(s, s.readInteger(), key); };
    switch (field) {
    case JobField::ArrayJobId:
        return integer(job.arrayJobId);
    case JobField::ArrayTaskId:
        return void(job.arrayTaskId = s.readInteger());
    case JobField::ArrayTaskString:
        return s.readString(job.arrayTaskString);
    case JobField::Batch:
        return void(job.batch = s.readBool());
    case JobField::Comment:
        return s.readString(job.comment);
    case JobField::Workdir:
        return s.readString(job.workdir);
    case JobField::EndTime:
        return integer(job.endTime);
    case JobField::ExitCode:
        return readExitCode(s, job);
    case JobField::GroupId:
        return integer(job.groupId);
    case JobField::JobId:
        return integer(job.jobId);
    case JobField::JobState:
        return readState(s, job.state);
    case JobField::Name:
        return s.readString(job.name);
    case JobField::NodeCount:
        return integer(job.nodeCount);
    case JobField::Nodes:
        return s.readString(job.nodes);
    case JobField::Priority:
        return integer(job.priority);
    case JobField::Partition:
        return s.readString(job.partition);
    case JobField::Account:
        return s.readString(job.account);
    case JobField::Qos:
        return s.readString(job.qos);
    case JobField::Features:
        return s.readString(job.features);
    case JobField::TresPerNode:
        return s.readString(job.tresPerNode);
    case JobField::Tasks:
        return void(job.tasks = s.readInteger());
    case JobField::TasksPerNode:
        return void(job.tasksPerNode = s.readInteger());
    case JobField::CpusPerTask:
        return void(job.cpusPerTask = s.readInteger());
    case JobField::MemoryPerNode:
        return void(job.memoryPerNodeMiB = s.readInteger());
    case JobField::MemoryPerCpu:
        return void(job.memoryPerCpuMiB = s.readInteger());
    case JobField::SubmitTime:
        return integer(job.submitTime);
    case JobField::EligibleTime:
        return integer(job.eligibleTime);
    case JobField::StartTime:
        return integer(job.startTime);
    case JobField::StateReason:
        return s.readString(job.stateReason);
    case JobField::TimeLimit:
        return void(job.timeLimitMinutes = s.readInteger());
    case JobField::UserId:
        return integer(job.userId);
    case JobField::UserName:
        return s.readString(job.userName);
    case JobField::Other:
        return s.skipValue();
    }
}

// Slurm prints a job's members in one fixed order and layout: each reader remembers, for each member of
// the job before, the exact bytes from the end of the previous value to the start of this one (comma,
// newline, indentation, quoted name, colon) and compares the document with them in one step instead of
// reading these tokens. Bytes that differ are simply read token by token, and the member learnt anew;
// bytes that match are what the token reader would have consumed, so the result is the same.
class MemberOrder {
public:
    struct Member {
        std::string lead; // e.g. ",\n      \"job_id\": "; empty: never matches
        std::size_t nameAt = 0, nameSize = 0; // the name between the quotes, within lead
        JobField field = JobField::Other;
        std::string_view name() const { return std::string_view(lead).substr(nameAt, nameSize); }
    };
    const Member* expected(std::size_t index) const
    {
        return index < members_.size() ? &members_[index] : nullptr;
    }
    void learn(std::size_t index, std::string_view lead, std::string_view raw, JobField field)
    {
        Member member;
        if (lead.size() <= maxLead) {
            member.lead = lead;
            member.nameAt = static_cast<std::size_t>(raw.data() - lead.data());
            member.nameSize = raw.size();
        }
        member.field = field;
        if (index < members_.size())
            members_[index] = std::move(member);
        else if (index == members_.size() && index < maxMembers)
            members_.push_back(std::move(member));
    }

private:
    // Bounds on what a hostile document can make us keep.
    static constexpr std::size_t maxMembers = 512;
    static constexpr std::size_t maxLead = 256;
    std::vector<Member> members_;
};

QueueJob readJob(Scanner& s, MemberOrder& order)
{
    QueueJob job;
    bool haveId = false;
    if (s.peek() != '{')
        s.fail("a job is not an object");
    s.expect('{');
    if (!s.consume('}')) {
        std::string scratch;
        for (std::size_t index = 0;; ++index) {
            const std::size_t from = s.position();
            JobField field;
            std::string_view name;
            if (const auto* member = order.expected(index); member && s.consumeBytes(member->lead)) {
                field = member->field;
                name = member->name();
            } else {
                if (index > 0 && !s.consume(','))
                    break;
                std::string_view raw;
                name = s.key(scratch, raw);
                field = jobFieldOf(name);
                s.colon();
                order.learn(index, s.text(from, s.position()), raw, field);
            }
            haveId |= field == JobField::JobId;
            readJobField(s, job, field, name);
        }
        s.expect('}');
    }
    if (!haveId)
        s.fail("a job without job_id");
    return job;
}

// A busy cluster's queue is tens of megabytes: its jobs list is read by several threads, each from a
// guessed element boundary. A guess is only trusted once the reader before it, itself started at a true
// boundary, arrives exactly there; any doubt (or error) and the list is read again by one thread, which
// also gives the error messages. So the result is always the one-thread result.
constexpr std::size_t parallelFrom = 4 << 20; // bytes of document
constexpr unsigned maxReaders = 4;
constexpr unsigned piecesPerReader = 4;

// The next position at or after `from` that looks like the start of an element of the jobs list: a
// '{' preceded by "}," and spaces. Inside a string this can be wrong, which the check above catches.
std::size_t guessJobStart(std::string_view t, std::size_t from)
{
    for (std::size_t at = t.find("},", from); at != std::string_view::npos; at = t.find("},", at + 2)) {
        std::size_t next = at + 2;
        while (next < t.size() && static_cast<unsigned char>(t[next]) <= ' ')
            ++next;
        if (next < t.size() && t[next] == '{')
            return next;
    }
    return std::string_view::npos;
}

// Room for the jobs in `bytes` of a jobs list whose first job took `firstJob` bytes: growing a vector
// of 10,000 jobs moves each of them about twice. Jobs of Slurm take kilobytes, so a document whose first
// job is much smaller is no guide and grows as usual.
std::size_t expectedJobs(std::size_t bytes, std::size_t firstJob)
{
    constexpr std::size_t smallestGuide = 512;
    return bytes / std::max(firstJob, smallestGuide) * 5 / 4 + 1;
}

// Reads the jobs list whose '[' is at `open`; returns the position after its ']', or npos when the
// parallel read cannot vouch for its result (then `jobs` is left empty).
std::size_t readJobsInParallel(std::string_view t, std::size_t open, std::vector<QueueJob>& jobs)
{
    const unsigned readers = std::min(maxReaders, std::max(1u, std::thread::hardware_concurrency()));
    if (readers < 2 || t.size() < parallelFrom)
        return std::string_view::npos;
    Scanner first(t, open);
    first.expect('[');
    if (first.peek() != '{')
        return std::string_view::npos; // empty or odd: the plain reader says what is wrong
    // More pieces than readers, each taken by the next free reader: a reader that the machine holds up
    // leaves its remaining pieces to the others instead of making every reader wait for its half.
    const unsigned pieces = readers * piecesPerReader;
    std::vector<std::size_t> starts { first.position() };
    for (unsigned k = 1; k < pieces; ++k) {
        const std::size_t guess = guessJobStart(t, starts.front() + (t.size() - starts.front()) * k / pieces);
        if (guess == std::string_view::npos || guess <= starts.back())
            break;
        starts.push_back(guess);
    }
    if (starts.size() < 2)
        return std::string_view::npos;
    struct alignas(64) Part { // a cache line of its own: each is written by its reader
        std::vector<QueueJob> jobs;
        std::size_t end = std::string_view::npos; // after ']' for the last part, else the next start
        bool ok = false;
    };
    std::vector<Part> parts(starts.size());
    auto read = [&](std::size_t k) {
        try {
            Scanner s(t, starts[k]);
            MemberOrder order;
            const bool last = k + 1 == starts.size();
            const std::size_t end = last ? t.size() : starts[k + 1];
            while (true) {
                parts[k].jobs.push_back(readJob(s, order));
                if (parts[k].jobs.size() == 1)
                    parts[k].jobs.reserve(expectedJobs(end - starts[k], s.position() - starts[k]));
                if (!s.consume(',')) {
                    s.expect(']');
                    parts[k].end = s.position();
                    parts[k].ok = last; // only the last part may end the list
                    return;
                }
                s.peek();
                if (!last && s.position() >= starts[k + 1]) {
                    parts[k].ok = s.position() == starts[k + 1];
                    return;
                }
            }
        } catch (const SqueueParseError&) {
            parts[k].ok = false;
        }
    };
    std::atomic<std::size_t> nextPiece { 0 };
    const auto reader = [&] {
        for (std::size_t k; (k = nextPiece++) < starts.size();)
            read(k);
    };
    std::vector<std::thread> threads;
    for (unsigned k = 1; k < readers; ++k)
        threads.emplace_back(reader);
    reader();
    for (auto& thread : threads)
        thread.join();
    if (!std::all_of(parts.begin(), parts.end(), [](const Part& part) { return part.ok; }))
        return std::string_view::npos;
    std::size_t total = 0;
    for (const Part& part : parts)
        total += part.jobs.size();
    jobs.reserve(total);
    for (Part& part : parts)
        std::move(part.jobs.begin(), part.jobs.end(), std::back_inserter(jobs));
    return parts.back().end;
}

} // namespace

QueueSnapshot parseSqueueJson(std::string_view text, std::int64_t takenAt)
{
    QueueSnapshot snapshot;
    snapshot.takenAt = takenAt;
    Scanner s(text);
    bool haveJobs = false;
    if (s.peek() != '{')
        s.fail("the document is not an object");
    s.object([&](std::string_view key) {
        if (key == "jobs") {
            if (s.isNull())
                return;
            haveJobs = true;
            const std::size_t open = (s.peek(), s.position());
            if (const std::size_t end = readJobsInParallel(text, open, snapshot.jobs);
                end != std::string_view::npos) {
                s = Scanner(text, end);
                return;
            }
            MemberOrder order;
            s.array([&] {
                snapshot.jobs.push_back(readJob(s, order));
                if (snapshot.jobs.size() == 1)
                    snapshot.jobs.reserve(expectedJobs(text.size() - open, s.position() - open));
            });
        } else if (key == "meta" && s.peek() == '{') {
            s.object([&](std::string_view metaKey) {
                // "Slurm" in 22.05, "slurm" from 23.02 on.
                if ((metaKey != "Slurm" && metaKey != "slurm") || s.peek() != '{')
                    return s.skipValue();
                s.object([&](std::string_view slurmKey) {
                    if (slurmKey == "release" && s.peek() == '"')
                        return s.readString(snapshot.slurmRelease);
                    s.skipValue();
                });
            });
        } else if (key == "errors" && s.peek() == '[') {
            s.array([&] {
                if (s.peek() != '{')
                    return s.skipValue();
                std::string message;
                s.object([&](std::string_view errorKey) {
                    if ((errorKey == "error" || errorKey == "description") && s.peek() == '"'
                        && message.empty())
                        return s.readString(message);
                    s.skipValue();
                });
                snapshot.errors.push_back(message.empty() ? "unspecified error" : message);
            });
        } else {
            s.skipValue();
        }
    });
    s.expectEnd();
    if (!haveJobs)
        throw SqueueParseError("squeue JSON: the document has no jobs list");
    return snapshot;
}

} // namespace baton::slurm
