#include "readers.hpp"

#include "fields.hpp"

#include <nlohmann/json.hpp>

#include <limits>
#include <optional>
#include <string>

namespace baton::trace {

namespace {

using nlohmann::json;

constexpr std::size_t maxJobObjectBytes = 64u << 20;

// A number of a job object: absent (or not set, or infinite), a value, or present but unusable
// (not a number, a fraction beyond int64, an unsigned number above 2^63 - 1). Unusable rejects the job:
// converting it would wrap (or, for a double, be undefined).
struct Number {
    bool bad = false;
    std::optional<std::int64_t> value;
};

// Slurm writes numbers either plain or, since 23.02, as {"set": true, "infinite": false, "number": N}.
Number number(const json& value)
{
    if (value.is_number_unsigned()) {
        const auto u = value.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            return { true, std::nullopt };
        return { false, static_cast<std::int64_t>(u) };
    }
    if (value.is_number_integer())
        return { false, value.get<std::int64_t>() };
    if (value.is_number_float()) {
        const double d = value.get<double>();
        // 2^63 is exactly representable; every double below it (and at or above -2^63) converts.
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
            return { true, std::nullopt };
        return { false, static_cast<std::int64_t>(d) };
    }
    if (value.is_object()) {
        auto flag = [&](const char* key, bool absent) -> std::optional<bool> {
            auto it = value.find(key);
            if (it == value.end())
                return absent;
            return it->is_boolean() ? std::optional<bool>(it->get<bool>()) : std::nullopt;
        };
        const auto set = flag("set", true), infinite = flag("infinite", false);
        if (!set || !infinite)
            return { true, std::nullopt };
        if (!*set || *infinite)
            return {};
        if (auto it = value.find("number"); it != value.end())
            return number(*it);
        return {};
    }
    if (value.is_null())
        return {};
    return { true, std::nullopt };
}

Number numberAt(const json& object, const char* key)
{
    if (!object.is_object())
        return {};
    auto it = object.find(key);
    return it == object.end() ? Number {} : number(*it);
}

// A string member, or "" when it is absent or anything else (22.05 writes "name": null in TRES lists).
std::string stringAt(const json& object, const char* key)
{
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A string, or the first string of an array (newer Slurm reports states as lists).
std::string firstString(const json& value)
{
    if (value.is_string())
        return value.get<std::string>();
    if (value.is_array() && !value.empty() && value.front().is_string())
        return value.front().get<std::string>();
    return {};
}

// A TRES list of `sacct --json` ([{"type": "cpu", "count": 8}, {"type": "gres", "name": "gpu", "count": 2}]):
// its CPU and GPU counts. Typed GPU entries ("gpu:a100") count when there is no untyped one; a list
// without GPU entries means none. False when a count is unusable.
bool tresCounts(const json& list, std::optional<std::int64_t>& cpus, std::int64_t& gpus)
{
    std::optional<std::int64_t> untyped;
    std::int64_t typed = 0;
    for (const auto& entry : list) {
        if (!entry.is_object())
            return false;
        const auto type = stringAt(entry, "type");
        const auto name = stringAt(entry, "name");
        const bool cpu = type == "cpu";
        const bool gpu = type == "gres" && (name == "gpu" || name.starts_with("gpu:"));
        if (!cpu && !gpu)
            continue;
        const auto count = numberAt(entry, "count");
        if (count.bad || !count.value || *count.value < 0 || *count.value > 100'000'000)
            return false;
        if (cpu)
            cpus = *count.value;
        else if (name == "gpu")
            untyped = *count.value;
        else
            typed += *count.value;
    }
    gpus = untyped ? *untyped : typed;
    return true;
}

// The "time" member: submission, start, end and limit. Returns nullptr, or why the job is rejected.
const char* readTimes(
    const json& object, TraceJob& job, std::int64_t& start, std::optional<std::int64_t>& end)
{
    const json empty = json::object();
    auto timeIt = object.find("time");
    const json& time = timeIt != object.end() && timeIt->is_object() ? *timeIt : empty;
    auto submit = numberAt(time, "submission");
    if (submit.bad || !submit.value || *submit.value <= 0)
        return "bad submit time";
    job.submit = *submit.value;
    auto started = numberAt(time, "start");
    if (started.bad)
        return "bad start time";
    if (!started.value || *started.value <= 0)
        return "never started";
    start = *started.value;
    auto ended = numberAt(time, "end");
    if (ended.bad)
        return "bad end time";
    end = ended.value && *ended.value > 0 ? ended.value : std::nullopt; // none while it still runs
    auto limit = numberAt(time, "limit");
    if (limit.bad)
        return "bad time limit";
    if (limit.value && *limit.value >= 0) {
        auto seconds = checkedMultiply(*limit.value, 60); // minutes
        if (!seconds)
            return "bad time limit";
        job.timeLimit = *seconds;
    }
    return nullptr;
}

// The allocated node count, else the required one.
const char* readNodes(const json& object, TraceJob& job)
{
    auto nodes = numberAt(object, "allocation_nodes");
    if (!nodes.value || *nodes.value < 1) {
        auto requiredIt = object.find("required");
        if (requiredIt != object.end())
            nodes = numberAt(*requiredIt, "nodes");
    }
    if (nodes.bad || !nodes.value || *nodes.value < 1 || *nodes.value > 1'000'000)
        return "bad node count";
    job.nodes = static_cast<std::int32_t>(*nodes.value);
    return nullptr;
}

// The required CPUs, then the allocated TRES, else the requested ones (a job that never ran has no
// allocation).
const char* readProcessors(const json& object, TraceJob& job)
{
    if (auto requiredIt = object.find("required"); requiredIt != object.end()) {
        auto cpus = numberAt(*requiredIt, "CPUs");
        auto cpus32 = cpus.value ? toInt32(*cpus.value) : std::nullopt;
        if (cpus.bad || (cpus.value && !cpus32))
            return "bad cpu count";
        if (cpus32) {
            job.requestedProcs = *cpus32;
            job.cpus = *cpus32;
        }
    }
    auto tresIt = object.find("tres");
    if (tresIt == object.end() || !tresIt->is_object())
        return nullptr;
    for (const char* which : { "allocated", "requested" }) {
        auto listIt = tresIt->find(which);
        if (listIt == tresIt->end() || !listIt->is_array() || listIt->empty())
            continue;
        std::optional<std::int64_t> cpus;
        std::int64_t gpus = 0;
        if (!tresCounts(*listIt, cpus, gpus))
            return "bad TRES list";
        if (cpus && *cpus > 0)
            job.cpus = static_cast<std::int32_t>(*cpus);
        job.gpus = static_cast<std::int32_t>(gpus);
        break;
    }
    return nullptr;
}

const char* toJob(const json& object, TraceJob& job)
{
    if (!object.is_object())
        return "malformed job object";
    job = TraceJob {};
    auto id = numberAt(object, "job_id");
    if (id.bad || !id.value || *id.value < 0)
        return "bad job id";
    job.jobId = *id.value;
    if (auto it = object.find("name"); it != object.end() && it->is_string())
        job.name = it->get<std::string>();
    if (auto it = object.find("user"); it != object.end() && it->is_string())
        job.user = it->get<std::string>();
    else if (auto uid = numberAt(object, "user_id"); uid.value)
        job.user = std::to_string(*uid.value);
    std::int64_t start = 0;
    std::optional<std::int64_t> end;
    if (const char* error = readTimes(object, job, start, end))
        return error;
    if (const char* error = readNodes(object, job))
        return error;
    auto priority = numberAt(object, "priority");
    if (priority.bad)
        return "bad priority";
    if (priority.value)
        job.priority = *priority.value;
    if (auto exitIt = object.find("exit_code"); exitIt != object.end()) {
        auto code = numberAt(*exitIt, "return_code");
        auto code32 = code.value ? toInt32(*code.value) : std::nullopt;
        if (code.bad || (code.value && !code32))
            return "bad exit code";
        if (code32)
            job.exitCode = *code32;
    }
    if (auto stateIt = object.find("state"); stateIt != object.end())
        job.state
            = stateIt->is_object() ? firstString(stateIt->value("current", json())) : firstString(*stateIt);
    if (const char* error = readProcessors(object, job))
        return error;
    if (auto it = object.find("partition"); it != object.end() && it->is_string())
        job.partition = it->get<std::string>();
    if (!isValidUtf8(job.name) || !isValidUtf8(job.user) || !isValidUtf8(job.partition))
        return "invalid characters in name";
    return job.setRunTimes(start, end);
}

} // namespace

SacctJsonReader::SacctJsonReader(const std::filesystem::path& path)
    : RowReader(path, TraceFormat::SacctJson, " holds no jobs")
{
    int c = skipSpace();
    if (c < 0)
        throw TraceError(path.string() + " is empty");
    if (c == '[') { // a bare array of jobs
        inJobs_ = true;
        return;
    }
    if (c != '{')
        fail("expected a JSON object");
    // Walk the top-level keys until "jobs"; other values are skipped without being kept.
    for (;;) {
        c = skipSpace();
        if (c == '}')
            fail("no \"jobs\" array");
        if (c != '"')
            fail("expected a key");
        readString(key_);
        if (skipSpace() != ':')
            fail("expected ':'");
        c = skipSpace();
        if (key_ == "jobs") {
            if (c != '[')
                fail("\"jobs\" is not an array");
            inJobs_ = true;
            return;
        }
        skipValue(c);
        c = skipSpace();
        if (c == '}')
            fail("no \"jobs\" array");
        if (c != ',')
            fail("expected ',' or '}'");
    }
}

void SacctJsonReader::fail(const std::string& what)
{
    throw TraceError(
        path_.string() + ": not sacct JSON at byte " + std::to_string(source_.offset()) + ": " + what);
}

int SacctJsonReader::expectByte()
{
    int c = source_.get();
    if (c < 0)
        throw TraceError(path_.string() + " is truncated: the JSON ends at byte "
            + std::to_string(source_.offset()) + " inside a value");
    return c;
}

int SacctJsonReader::skipSpace()
{
    for (;;) {
        int c = source_.get();
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t')
            return c;
    }
}

void SacctJsonReader::readString(std::string& out)
{
    out.clear();
    for (;;) {
        int c = expectByte();
        if (c == '"')
            return;
        if (c == '\\') {
            out.push_back('\\');
            c = expectByte();
        }
        if (out.size() > maxJobObjectBytes)
            fail("string too long");
        out.push_back(static_cast<char>(c));
    }
}

void SacctJsonReader::skipValue(int first)
{
    if (first == '"') {
        readString(key_);
        return;
    }
    if (first != '{' && first != '[') { // number, true, false, null: up to the next delimiter
        if (first < 0)
            expectByte();
        for (;;) {
            int c = source_.get();
            if (c < 0)
                return;
            if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                source_.unget();
                return;
            }
        }
    }
    // A nested value: count brackets outside strings.
    int depth = 1;
    while (depth > 0) {
        int c = expectByte();
        if (c == '"')
            readString(key_);
        else if (c == '{' || c == '[')
            ++depth;
        else if (c == '}' || c == ']')
            --depth;
    }
}

void SacctJsonReader::captureObject(std::string& out)
{
    out.assign(1, '{');
    int depth = 1;
    bool inString = false;
    while (depth > 0) {
        int c = expectByte();
        out.push_back(static_cast<char>(c));
        if (inString) {
            if (c == '\\')
                out.push_back(static_cast<char>(expectByte()));
            else if (c == '"')
                inString = false;
        } else if (c == '"') {
            inString = true;
        } else if (c == '{' || c == '[') {
            ++depth;
        } else if (c == '}' || c == ']') {
            --depth;
        }
        if (out.size() > maxJobObjectBytes)
            fail("a job object is larger than 64 MiB");
    }
}

bool SacctJsonReader::nextRow()
{
    if (!inJobs_ || done_)
        return false;
    int c = skipSpace();
    if (c == ',')
        c = skipSpace();
    if (c == ']') {
        done_ = true;
        return false;
    }
    if (c < 0)
        expectByte(); // throws: truncated
    rowStart_ = c;
    return true;
}

const char* SacctJsonReader::rowToJob(TraceJob& job)
{
    if (rowStart_ != '{') {
        skipValue(rowStart_);
        return "malformed job object";
    }
    captureObject(object_);
    json object = json::parse(object_, nullptr, false);
    if (object.is_discarded())
        return "malformed job object";
    try {
        return toJob(object, job);
    } catch (const json::exception&) { // a member of an unexpected type that toJob did not check
        return "malformed job object";
    }
}

} // namespace baton::trace
