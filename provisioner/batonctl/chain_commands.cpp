// The chain commands: submit, chains, show, policy and the transitions (resubmit, preempt, pause, resume,
// cancel), all requests to batond's HTTP API. batond decides what each user may see and do; batonctl only shows
// its answers. The JSON field names read here are those of the batond contract; detail rows accept a few
// alternative names (`job_id` or `slurm_job_id`, `*_unix` or `*_time`) so that a renamed column shows as
// "-" rather than failing the command.
#include "command.hpp"

#include "api_client.hpp"

#include "common/baton_contract.hpp"
#include "common/users.hpp"
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace baton::ctl {

namespace {

using nlohmann::json;

void addServerOptions(CommandSpec& spec)
{
    spec.option("server", "URL", "batond's address; else $BATON_SERVER, else " + std::string(defaultServer))
        .option("timeout", "SECONDS", "give up on batond after this long", "30");
}

ApiClient clientFor(const ParsedCommand& command)
{
    const long long timeout = command.integer("timeout");
    if (timeout <= 0)
        throw command.usageError("--timeout needs a positive number of seconds");
    return ApiClient(serverUrl(command.text("server")), std::chrono::seconds(timeout));
}

json parseDocument(const std::string& body)
{
    auto document = json::parse(body, nullptr, false);
    if (document.is_discarded() || !document.is_object())
        throw CommandFailure(exitFailure, "batond answered with something that is not a JSON object");
    return document;
}

// The first of `names` present and not null in `object`.
const json* field(const json& object, std::initializer_list<const char*> names)
{
    if (!object.is_object())
        return nullptr;
    for (const char* name : names)
        if (const auto it = object.find(name); it != object.end() && !it->is_null())
            return &*it;
    return nullptr;
}

std::string formatTime(const json* value)
{
    if (!value)
        return "-";
    if (value->is_string())
        return value->get<std::string>();
    if (!value->is_number())
        return value->dump();
    const auto seconds = static_cast<std::time_t>(value->get<double>());
    std::tm tm {};
    gmtime_r(&seconds, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
    return text;
}

std::string formatValue(const json* value)
{
    if (!value)
        return "-";
    if (value->is_string())
        return value->get<std::string>();
    if (value->is_boolean())
        return value->get<bool>() ? "yes" : "no";
    if (value->is_number_float()) {
        char text[32];
        std::snprintf(text, sizeof text, "%.0f", value->get<double>());
        return text;
    }
    return value->dump();
}

std::string formatBytes(const json* value)
{
    if (!value || !value->is_number())
        return formatValue(value);
    double bytes = value->get<double>();
    const char* units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    std::size_t unit = 0;
    while (bytes >= 1024 && unit + 1 < std::size(units)) {
        bytes /= 1024;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
    return text;
}

// A text table: columns as wide as their widest cell, two spaces apart.
class Table {
public:
    explicit Table(std::vector<std::string> headers)
        : headers_(std::move(headers))
    { }
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    void print(std::ostream& out) const
    {
        std::vector<std::size_t> widths(headers_.size());
        for (std::size_t c = 0; c < headers_.size(); ++c)
            widths[c] = headers_[c].size();
        for (const auto& row : rows_)
            for (std::size_t c = 0; c < row.size() && c < widths.size(); ++c)
                widths[c] = std::max(widths[c], row[c].size());
        auto line = [&](const std::vector<std::string>& cells) {
            std::string text;
            for (std::size_t c = 0; c < cells.size() && c < widths.size(); ++c) {
                text += cells[c];
                if (c + 1 < cells.size())
                    text += std::string(widths[c] - cells[c].size() + 2, ' ');
            }
            out << text << "\n";
        };
        line(headers_);
        for (const auto& row : rows_)
            line(row);
    }

private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

struct ChainRef {
    std::string owner;
    std::string name;
};

// [OWNER/]NAME; without an owner, the invoking user's own chain.
ChainRef parseChainRef(const ParsedCommand& command, const std::string& text)
{
    ChainRef ref;
    if (const auto slash = text.find('/'); slash != std::string::npos) {
        ref.owner = text.substr(0, slash);
        ref.name = text.substr(slash + 1);
        if (ref.owner.empty() || ref.name.empty() || ref.name.find('/') != std::string::npos)
            throw command.usageError("expected [OWNER/]NAME, got '" + text + "'");
    } else {
        ref.name = text;
        const auto user = os::findUser(getuid());
        ref.owner = user ? user->name : std::to_string(getuid());
    }
    if (ref.name.empty())
        throw command.usageError("the chain name is empty");
    return ref;
}

std::string chainPath(const ChainRef& ref)
{
    return "/v1/chains/" + encodeComponent(ref.owner) + "/" + encodeComponent(ref.name);
}

std::string chainLabel(const json& chain)
{
    return formatValue(field(chain, { "owner", "owner_uid" })) + "/" + formatValue(field(chain, { "name" }));
}

// The policy that decides for the chain, and whether it is the chain's own or the service's.
std::string policyLabel(const json& chain)
{
    const json* from = field(chain, { "policy_from" });
    return formatValue(field(chain, { "policy" }))
        + (from && from->is_string() && from->get<std::string>() == "service" ? " (the service's)" : "");
}

void printChainHeader(const json& chain, std::ostream& out)
{
    out << "chain " << chainLabel(chain) << "\n";
    out << "  state " << formatValue(field(chain, { "state" })) << ", seq "
        << formatValue(field(chain, { "seq" })) << ", last handover from seq "
        << formatValue(field(chain, { "last_handover_seq" })) << ", retries "
        << formatValue(field(chain, { "retries" })) << "\n";
    out << "  current job " << formatValue(field(chain, { "current_job" })) << ", pending job "
        << formatValue(field(chain, { "pending_job" }));
    if (const json* second = field(chain, { "second_pending_job" }); second && !second->is_null())
        out << ", then job " << formatValue(second); // queued behind the pending one (successors_in_flight 2)
    out << "\n";
    out << "  policy " << policyLabel(chain) << "\n";
    if (const json* reason = field(chain, { "reason" }))
        out << "  reason: " << formatValue(reason) << "\n";
    if (const json* dir = field(chain, { "chain_dir" }))
        out << "  directory " << formatValue(dir) << "\n";
    out << "  updated " << formatTime(field(chain, { "updated_unix", "updated_at" })) << " UTC\n";
}

const json& arrayOf(const json& document, const char* name)
{
    static const json empty = json::array();
    const auto it = document.find(name);
    return it != document.end() && it->is_array() ? *it : empty;
}

// Seconds between the previous job's end and this one's start: positive = interruption, negative =
// overlap. batond's own figure wins when it sends one.
std::string interruption(const json& job, const json* previous)
{
    if (const json* given = field(job, { "interruption_s", "gap_s" }))
        return formatValue(given);
    if (!previous)
        return "-";
    const json* start = field(job, { "start_unix", "start_time", "start" });
    const json* end = field(*previous, { "end_unix", "end_time", "end" });
    if (!start || !end || !start->is_number() || !end->is_number())
        return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%+.0f", start->get<double>() - end->get<double>());
    return text;
}

void printDetail(const json& document, std::ostream& out)
{
    printChainHeader(document.value("chain", json::object()), out);
    if (const json* with = field(document, { "submits_with" }); with && with->is_object() && !with->empty()) {
        out << "  next jobs: from " << formatValue(field(*with, { "source" })) << ", sbatch";
        if (const json* args = field(*with, { "sbatch_args" }); args && args->is_array())
            for (const auto& arg : *args)
                out << " " << (arg.is_string() ? arg.get<std::string>() : arg.dump());
        out << "\n";
        if (const json* note = field(*with, { "note" }))
            out << "  note: " << formatValue(note) << "\n";
    }

    out << "\njobs (interruption: seconds from the previous job's end to this one's start; negative: "
           "overlap)\n";
    Table jobs({ "seq", "job", "state", "submit", "start", "end", "interruption(s)" });
    const json* previous = nullptr;
    for (const auto& job : arrayOf(document, "jobs")) {
        // A withdrawn job (cancelled while queued, or refused) never ran: it is no link of the chain.
        const json* flag = field(job, { "withdrawn" });
        const bool withdrawn = flag && flag->is_boolean() && flag->get<bool>();
        jobs.add({ formatValue(field(job, { "seq" })), formatValue(field(job, { "job_id", "slurm_job_id" })),
            formatValue(field(job, { "state" })),
            formatTime(field(job, { "submit_unix", "submit_time", "submit" })),
            formatTime(field(job, { "start_unix", "start_time", "start" })),
            formatTime(field(job, { "end_unix", "end_time", "end" })),
            withdrawn ? std::string("withdrawn") : interruption(job, previous) });
        if (!withdrawn)
            previous = &job;
    }
    jobs.print(out);

    out << "\ncheckpoints\n";
    Table checkpoints({ "iteration", "job", "created", "size", "final", "training done" });
    for (const auto& checkpoint : arrayOf(document, "checkpoints"))
        checkpoints.add({ formatValue(field(checkpoint, { "iteration" })),
            formatValue(field(checkpoint, { "job_id", "slurm_job_id" })),
            formatTime(field(checkpoint, { "created_unix", "created_at" })),
            formatBytes(field(checkpoint, { "total_bytes" })), formatValue(field(checkpoint, { "final" })),
            formatValue(field(checkpoint, { "training_done" })) });
    checkpoints.print(out);

    out << "\nhandovers\n";
    Table handovers({ "time", "from seq", "from job", "to job", "outcome" });
    for (const auto& handover : arrayOf(document, "handovers"))
        handovers.add({ formatTime(field(handover, { "time_unix", "created_unix", "at" })),
            formatValue(field(handover, { "predecessor_seq" })),
            formatValue(field(handover, { "from_job", "predecessor_job" })),
            formatValue(field(handover, { "to_job", "successor_job" })),
            formatValue(field(handover, { "outcome", "state" })) });
    handovers.print(out);

    out << "\ndecisions\n";
    Table decisions({ "time", "policy", "action", "predicted wait(s)", "outcome" });
    for (const auto& decision : arrayOf(document, "decisions"))
        decisions.add({ formatTime(field(decision, { "time_unix", "decided_unix", "decided_at" })),
            formatValue(field(decision, { "policy" })), formatValue(field(decision, { "action" })),
            formatValue(field(decision, { "predicted_wait_s", "predicted_wait" })),
            formatValue(field(decision, { "outcome" })) });
    decisions.print(out);
}

std::string readScript(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw CommandFailure(exitFailure, "cannot read the batch script " + path);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in.good() && !in.eof())
        throw CommandFailure(exitFailure, "cannot read the batch script " + path);
    return text.str();
}

int runSubmit(const ParsedCommand& command)
{
    const std::string name = command.text("chain");
    if (name.empty())
        throw command.usageError("--chain NAME is required");
    if (!contract::validChainName(name))
        throw command.usageError("--chain: the chain name must be " + contract::chainNameRule());
    std::string workdir = command.text("workdir");
    const auto absolute = std::filesystem::absolute(workdir.empty() ? "." : workdir).lexically_normal();
    workdir = absolute.string();
    if (workdir.size() > 1 && workdir.back() == '/')
        workdir.pop_back();
    json request { { "name", name }, { "script", readScript(command.argument("SCRIPT")) },
        { "sbatch_args", command.trailing() }, { "workdir", workdir } };
    if (command.has("policy"))
        request["policy"] = command.text("policy");
    auto client = clientFor(command);
    const std::string body = client.post("/v1/chains", request.dump());
    if (command.flag("json")) {
        std::cout << body << (body.empty() || body.back() != '\n' ? "\n" : "");
        return exitOk;
    }
    const json answer = parseDocument(body);
    const json chain = answer.value("chain", json::object());
    std::cout << "submitted chain " << (chain.is_object() ? chainLabel(chain) : name) << ": first job "
              << formatValue(field(answer, { "job_id" })) << "\n";
    return exitOk;
}

int runChains(const ParsedCommand& command)
{
    std::string base = "/v1/chains?limit=500";
    if (command.has("state"))
        base += "&state=" + encodeComponent(command.text("state"));
    auto client = clientFor(command);
    // The service answers a page at a time; the pages are read in turn and shown as one list.
    json chains = json::array();
    for (std::string target = base;;) {
        const json page = parseDocument(client.get(target));
        for (const auto& chain : arrayOf(page, "chains"))
            chains.push_back(chain);
        const json* next = field(page, { "next_after" });
        if (!next || !next->is_number_integer())
            break;
        target = base + "&after=" + std::to_string(next->get<std::int64_t>());
    }
    if (command.flag("json")) {
        std::cout << json { { "chains", chains } }.dump() << "\n";
        return exitOk;
    }
    if (chains.empty()) {
        std::cout << "no chains\n";
        return exitOk;
    }
    Table table({ "owner", "name", "state", "seq", "current job", "pending job", "policy", "updated (UTC)" });
    for (const auto& chain : chains)
        table.add(
            { formatValue(field(chain, { "owner", "owner_uid" })), formatValue(field(chain, { "name" })),
                formatValue(field(chain, { "state" })), formatValue(field(chain, { "seq" })),
                formatValue(field(chain, { "current_job" })), formatValue(field(chain, { "pending_job" })),
                policyLabel(chain), formatTime(field(chain, { "updated_unix", "updated_at" })) });
    table.print(std::cout);
    return exitOk;
}

int runShow(const ParsedCommand& command)
{
    const ChainRef ref = parseChainRef(command, command.argument("CHAIN"));
    auto client = clientFor(command);
    const std::string body = client.get(chainPath(ref));
    if (command.flag("json")) {
        std::cout << body << (body.empty() || body.back() != '\n' ? "\n" : "");
        return exitOk;
    }
    printDetail(parseDocument(body), std::cout);
    return exitOk;
}

int runTransition(const ParsedCommand& command, const std::string& action)
{
    const ChainRef ref = parseChainRef(command, command.argument("CHAIN"));
    auto client = clientFor(command);
    const std::string body = client.post(chainPath(ref) + "/" + action, "");
    if (command.flag("json")) {
        std::cout << body << (body.empty() || body.back() != '\n' ? "\n" : "");
        return exitOk;
    }
    const json chain = parseDocument(body).value("chain", json::object());
    std::cout << action << " " << ref.owner << "/" << ref.name << ": state "
              << formatValue(field(chain, { "state" })) << ", current job "
              << formatValue(field(chain, { "current_job" })) << ", pending job "
              << formatValue(field(chain, { "pending_job" })) << "\n";
    return exitOk;
}

int runPolicy(const ParsedCommand& command)
{
    const ChainRef ref = parseChainRef(command, command.argument("CHAIN"));
    const std::string policy = command.argument("POLICY");
    auto client = clientFor(command);
    const json request { { "policy", policy == "default" ? json() : json(policy) } };
    const std::string body = client.post(chainPath(ref) + "/policy", request.dump());
    if (command.flag("json")) {
        std::cout << body << (body.empty() || body.back() != '\n' ? "\n" : "");
        return exitOk;
    }
    const json chain = parseDocument(body).value("chain", json::object());
    std::cout << "chain " << ref.owner << "/" << ref.name << ": policy " << policyLabel(chain) << "\n";
    return exitOk;
}

CommandSpec transitionSpec(const std::string& action, const std::string& summary)
{
    CommandSpec spec("batonctl " + action, summary);
    spec.argument("CHAIN", "[OWNER/]NAME; without OWNER, your own chain")
        .flag("json", "print batond's answer as is");
    addServerOptions(spec);
    return spec;
}

int transition(std::span<const std::string> args, const std::string& action, const std::string& summary)
{
    const CommandSpec spec = transitionSpec(action, summary);
    return runCommand(
        spec, args, [&](const ParsedCommand& command) { return runTransition(command, action); });
}

} // namespace

int submitCommand(std::span<const std::string> args)
{
    static const CommandSpec spec = [] {
        CommandSpec spec("batonctl submit",
            "Start a chain: batond submits SCRIPT as its first job (as you) and its successors later.");
        spec.argument("SCRIPT", "the batch script; its text is sent to batond")
            .trailing("SBATCH_ARGS", "sbatch options for every job of the chain, e.g. -- --time=2:00:00 -N 2")
            .option("chain", "NAME", "the chain's name (unique among your chains); required")
            .option("workdir", "DIR", "the jobs' working directory (default: the current directory)")
            .option("policy", "NAME",
                "when batond submits its successors: reactive, avg, predict or checkpoint-aware (default: "
                "the service's policy)")
            .flag("json", "print batond's answer as is");
        addServerOptions(spec);
        spec.note("example: batonctl submit --chain train job.sh -- --time=4:00:00 --nodes=2");
        return spec;
    }();
    return runCommand(spec, args, runSubmit);
}

int chainsCommand(std::span<const std::string> args)
{
    static const CommandSpec spec = [] {
        CommandSpec spec("batonctl chains", "List chains: your own, or all of them for operators.");
        spec.option("state", "STATE", "only chains in this state (e.g. running, paused)")
            .flag("json", "print batond's answer as is");
        addServerOptions(spec);
        return spec;
    }();
    return runCommand(spec, args, runChains);
}

int showCommand(std::span<const std::string> args)
{
    static const CommandSpec spec = [] {
        CommandSpec spec(
            "batonctl show", "One chain: its state, jobs, checkpoints, handovers and decisions.");
        spec.argument("CHAIN", "[OWNER/]NAME; without OWNER, your own chain")
            .flag("json", "print batond's document as is");
        addServerOptions(spec);
        return spec;
    }();
    return runCommand(spec, args, runShow);
}

int policyCommand(std::span<const std::string> args)
{
    static const CommandSpec spec = [] {
        CommandSpec spec("batonctl policy",
            "Choose when batond submits a chain's successors, from its next decision on; also for chains "
            "begun with sbatch --baton.");
        spec.argument("CHAIN", "[OWNER/]NAME; without OWNER, your own chain")
            .argument("POLICY", "reactive, avg, predict or checkpoint-aware; default: the service's policy")
            .flag("json", "print batond's answer as is");
        addServerOptions(spec);
        spec.note("example: batonctl policy train checkpoint-aware");
        return spec;
    }();
    return runCommand(spec, args, runPolicy);
}

int resubmitCommand(std::span<const std::string> args)
{
    return transition(args, "resubmit", "Submit the chain's next job now.");
}

int preemptCommand(std::span<const std::string> args)
{
    return transition(args, "preempt",
        "Hand over now: the running job writes a final checkpoint and exits, its successor takes over.");
}

int pauseCommand(std::span<const std::string> args)
{
    return transition(args, "pause", "Stop submitting successors; the running job goes on.");
}

int resumeCommand(std::span<const std::string> args)
{
    return transition(args, "resume", "Submit successors of a paused chain again.");
}

int cancelCommand(std::span<const std::string> args)
{
    return transition(args, "cancel", "Cancel the chain and its pending and running jobs.");
}

} // namespace baton::ctl
