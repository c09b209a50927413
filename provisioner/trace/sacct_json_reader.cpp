#include "readers.hpp"

#include "fields.hpp"

#include <nlohmann/json.hpp>

namespace baton::trace {

namespace {

using nlohmann::json;

constexpr std::size_t maxJobObjectBytes = 64u << 20;

// Slurm writes numbers either plain or, since 23.02, as {"set": true, "infinite": false, "number": N}.
std::optional<std::int64_t> number(const json& value)
{
    if (value.is_number_integer())
        return value.get<std::int64_t>();
    if (value.is_number_float())
        return static_cast<std::int64_t>(value.get<double>());
    if (value.is_object()) {
        if (!value.value("set", true) || value.value("infinite", false))
            return std::nullopt;
        if (auto it = value.find("number"); it != value.end())
            return number(*it);
    }
    return std::nullopt;
}

std::optional<std::int64_t> numberAt(const json& object, const char* key)
{
    if (!object.is_object())
        return std::nullopt;
    auto it = object.find(key);
    return it == object.end() ? std::nullopt : number(*it);
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

const char* toJob(const json& object, TraceJob& job)
{
    if (!object.is_object())
        return "malformed job object";
    job = TraceJob {};
    auto id = numberAt(object, "job_id");
    if (!id || *id < 0)
        return "bad job id";
    job.jobId = *id;
    if (auto it = object.find("name"); it != object.end() && it->is_string())
        job.name = it->get<std::string>();
    if (auto it = object.find("user"); it != object.end() && it->is_string())
        job.user = it->get<std::string>();
    else if (auto uid = numberAt(object, "user_id"))
        job.user = std::to_string(*uid);
    const json empty = json::object();
    auto timeIt = object.find("time");
    const json& time = timeIt != object.end() && timeIt->is_object() ? *timeIt : empty;
    auto submit = numberAt(time, "submission");
    if (!submit || *submit <= 0)
        return "bad submit time";
    job.submit = *submit;
    auto start = numberAt(time, "start");
    if (!start || *start <= 0)
        return "never started";
    job.start = start;
    if (auto end = numberAt(time, "end"); end && *end > 0) {
        if (*end < *start)
            return "end before start";
        job.end = end;
    }
    if (*start < job.submit)
        return "start before submit";
    if (auto limit = numberAt(time, "limit"); limit && *limit >= 0)
        job.timeLimit = *limit * 60; // minutes
    auto nodes = numberAt(object, "allocation_nodes");
    if (!nodes || *nodes < 1) {
        auto requiredIt = object.find("required");
        if (requiredIt != object.end())
            nodes = numberAt(*requiredIt, "nodes");
    }
    if (!nodes || *nodes < 1 || *nodes > 1'000'000)
        return "bad node count";
    job.nodes = static_cast<std::int32_t>(*nodes);
    if (auto priority = numberAt(object, "priority"))
        job.priority = *priority;
    if (auto exitIt = object.find("exit_code"); exitIt != object.end())
        if (auto code = numberAt(*exitIt, "return_code"))
            job.exitCode = static_cast<std::int32_t>(*code);
    if (auto stateIt = object.find("state"); stateIt != object.end())
        job.state
            = stateIt->is_object() ? firstString(stateIt->value("current", json())) : firstString(*stateIt);
    if (auto requiredIt = object.find("required"); requiredIt != object.end())
        if (auto cpus = numberAt(*requiredIt, "CPUs"))
            job.requestedProcs = static_cast<std::int32_t>(*cpus);
    if (!isValidUtf8(job.name) || !isValidUtf8(job.user))
        return "invalid characters in name";
    job.wait = *start - job.submit;
    if (job.end)
        job.runTime = *job.end - *start;
    job.requestedTime = job.timeLimit;
    return nullptr;
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
    return object.is_discarded() ? "malformed job object" : toJob(object, job);
}

} // namespace baton::trace
