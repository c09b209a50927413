#include "sbatch_args.hpp"

#include <algorithm>
#include <array>
#include <string_view>

namespace baton::slurm {

namespace {

enum class Takes { Nothing, Value, OptionalValue }; // getopt_long's no/required/optional_argument

struct Option {
    std::string_view name; // the long name, without "--"
    char letter; // the short form, 0 if none
    Takes takes;
    // Empty: a chain may carry it. Else why not.
    std::string_view refused = {};
};

constexpr std::string_view byBatond = "batond sets it itself";
constexpr std::string_view noJob = "sbatch would submit no job";

// sbatch's options (Slurm 22.05 to 24.11) that a chain's jobs may carry: their shape (size, time,
// placement, accounting, output files, signals) and the plugin's own settings. Then the options refused
// with a reason that says more than "not allowed". Any other option, sbatch's or not, is refused too.
constexpr std::array options {
    // What the job needs and how long.
    Option { "time", 't', Takes::Value },
    // The job's own earliest start: its owner may delay a successor (it starts that much later after
    // its submission); the policy still decides when it is submitted.
    Option { "begin", 'b', Takes::Value },
    Option { "time-min", 0, Takes::Value },
    Option { "nodes", 'N', Takes::Value },
    Option { "ntasks", 'n', Takes::Value },
    Option { "ntasks-per-node", 0, Takes::Value },
    Option { "ntasks-per-core", 0, Takes::Value },
    Option { "ntasks-per-socket", 0, Takes::Value },
    Option { "ntasks-per-gpu", 0, Takes::Value },
    Option { "cpus-per-task", 'c', Takes::Value },
    Option { "cpus-per-gpu", 0, Takes::Value },
    Option { "mincpus", 0, Takes::Value },
    Option { "mem", 0, Takes::Value },
    Option { "mem-per-cpu", 0, Takes::Value },
    Option { "mem-per-gpu", 0, Takes::Value },
    Option { "tmp", 0, Takes::Value },
    Option { "gres", 0, Takes::Value },
    Option { "gres-flags", 0, Takes::Value },
    Option { "gpus", 'G', Takes::Value },
    Option { "gpus-per-node", 0, Takes::Value },
    Option { "gpus-per-socket", 0, Takes::Value },
    Option { "gpus-per-task", 0, Takes::Value },
    Option { "tres-per-task", 0, Takes::Value },
    Option { "licenses", 'L', Takes::Value },
    // Where and with whom it runs.
    Option { "partition", 'p', Takes::Value },
    Option { "account", 'A', Takes::Value },
    Option { "qos", 'q', Takes::Value },
    Option { "reservation", 0, Takes::Value },
    Option { "wckey", 0, Takes::Value },
    Option { "constraint", 'C', Takes::Value },
    Option { "prefer", 0, Takes::Value },
    Option { "exclusive", 0, Takes::OptionalValue },
    Option { "oversubscribe", 's', Takes::Nothing },
    Option { "overcommit", 'O', Takes::Nothing },
    Option { "nodelist", 'w', Takes::Value },
    Option { "exclude", 'x', Takes::Value },
    Option { "contiguous", 0, Takes::Nothing },
    Option { "switches", 0, Takes::Value },
    Option { "spread-job", 0, Takes::Nothing },
    Option { "use-min-nodes", 0, Takes::Nothing },
    Option { "wait-all-nodes", 0, Takes::Value },
    Option { "core-spec", 'S', Takes::Value },
    Option { "thread-spec", 0, Takes::Value },
    Option { "extra-node-info", 'B', Takes::Value },
    Option { "sockets-per-node", 0, Takes::Value },
    Option { "cores-per-socket", 0, Takes::Value },
    Option { "threads-per-core", 0, Takes::Value },
    Option { "hint", 0, Takes::Value },
    Option { "distribution", 'm', Takes::Value },
    Option { "mem-bind", 0, Takes::Value },
    Option { "gpu-bind", 0, Takes::Value },
    Option { "tres-bind", 0, Takes::Value },
    Option { "cpu-freq", 0, Takes::Value },
    Option { "gpu-freq", 0, Takes::Value },
    Option { "network", 0, Takes::Value },
    Option { "nice", 0, Takes::OptionalValue },
    // The job's files, environment and signals.
    Option { "job-name", 'J', Takes::Value },
    Option { "output", 'o', Takes::Value },
    Option { "error", 'e', Takes::Value },
    Option { "input", 'i', Takes::Value },
    Option { "open-mode", 0, Takes::Value },
    Option { "chdir", 'D', Takes::Value },
    Option { "export", 0, Takes::Value },
    Option { "propagate", 0, Takes::OptionalValue },
    Option { "signal", 0, Takes::Value },
    Option { "no-kill", 0, Takes::OptionalValue },
    Option { "no-requeue", 0, Takes::Nothing },
    Option { "oom-kill-step", 0, Takes::OptionalValue },
    Option { "mail-type", 0, Takes::Value },
    Option { "mail-user", 0, Takes::Value },
    Option { "profile", 0, Takes::Value },
    Option { "acctg-freq", 0, Takes::Value },
    Option { "quiet", 'Q', Takes::Nothing },
    Option { "verbose", 'v', Takes::Nothing },
    // The plugin's settings for the job (spank_baton.so).
    Option { "baton-dir", 0, Takes::Value },
    Option { "baton-overhead", 0, Takes::Value },
    Option { "baton-margin", 0, Takes::Value },
    Option { "baton-handover-wait", 0, Takes::Value },
    Option { "baton", 0, Takes::OptionalValue, "batond sets it itself (the chain's name)" },
    Option { "baton-seq", 0, Takes::Value, "batond sets it itself (the job's seq)" },
    // Refused, and why.
    Option { "wait", 'W', Takes::Nothing, "sbatch would wait until the job ends" },
    Option { "test-only", 0, Takes::Nothing, noJob },
    Option { "help", 'h', Takes::Nothing, noJob },
    Option { "usage", 0, Takes::Nothing, noJob },
    Option { "version", 'V', Takes::Nothing, noJob },
    Option { "parsable", 0, Takes::Nothing, byBatond },
    Option { "comment", 0, Takes::Value, "batond sets it itself (the job's key)" },
    Option { "wrap", 0, Takes::Value, "the chain's batch script is the job's" },
    Option { "uid", 0, Takes::Value, "a chain's jobs run as its owner" },
    Option { "gid", 0, Takes::Value, "a chain's jobs run as its owner" },
    Option { "get-user-env", 0, Takes::OptionalValue, "a chain's jobs run as its owner" },
    Option { "hold", 'H', Takes::Nothing, "a held job would not start when the chain needs it" },
    Option { "deadline", 0, Takes::Value, "batond decides when a job is submitted" },
    Option { "dependency", 'd', Takes::Value, "batond orders the chain's jobs" },
    Option { "kill-on-invalid-dep", 0, Takes::Value, "batond orders the chain's jobs" },
    Option { "array", 'a', Takes::Value, "a chain's job is one job, not an array" },
    Option { "clusters", 'M', Takes::Value, "batond watches its own cluster only" },
    Option { "cluster-constraint", 0, Takes::Value, "batond watches its own cluster only" },
    Option { "export-file", 0, Takes::Value, "the file would be read at each submission, as the owner" },
    Option { "nodefile", 'F', Takes::Value, "the file would be read at each submission, as the owner" },
};

const Option* byName(std::string_view name)
{
    const auto found
        = std::find_if(options.begin(), options.end(), [&](const Option& o) { return o.name == name; });
    return found == options.end() ? nullptr : &*found;
}

const Option* byLetter(char letter)
{
    const auto found
        = std::find_if(options.begin(), options.end(), [&](const Option& o) { return o.letter == letter; });
    return found == options.end() ? nullptr : &*found;
}

std::string quoted(std::string_view arg)
{
    return "'" + std::string(arg) + "'";
}

// Why `option` may not be used here, or nullopt.
std::optional<std::string> verdict(
    const Option& option, std::string_view arg, ChainOption chainOption, int& chainOptions)
{
    if (option.name == "baton" && chainOption == ChainOption::AllowedOnce) {
        if (++chainOptions == 1)
            return std::nullopt;
        return "sbatch argument " + quoted(arg) + " is refused: --baton is given more than once";
    }
    if (option.refused.empty())
        return std::nullopt;
    return "sbatch argument " + quoted(arg) + " is refused: --" + std::string(option.name) + ": "
        + std::string(option.refused);
}

} // namespace

std::optional<std::string> checkSbatchArgs(const std::vector<std::string>& args, ChainOption chainOption)
{
    for (const std::string& arg : args)
        if (arg.find('\0') != std::string::npos)
            return "an sbatch argument holds a NUL byte";
    int chainOptions = 0;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--")
            return "sbatch argument '--' is refused: what follows it would be taken as the script";
        if (arg.size() < 2 || arg.front() != '-')
            return "sbatch argument " + quoted(arg)
                + " is not an option: sbatch would take it as the script (the chain has its own)";

        if (arg.starts_with("--")) {
            const auto equals = arg.find('=');
            const std::string_view name
                = std::string_view(arg).substr(2, equals == std::string::npos ? arg.npos : equals - 2);
            const Option* option = byName(name);
            if (!option) {
                // getopt_long takes a unique prefix (`--wai` is --wait): only full names pass here.
                std::string meant;
                for (const Option& o : options)
                    if (!name.empty() && o.name.starts_with(name))
                        meant += (meant.empty() ? "" : ", ") + ("--" + std::string(o.name));
                if (!meant.empty())
                    return "sbatch argument " + quoted(arg) + " is refused: an abbreviation (of " + meant
                        + "); write options in full";
                return "sbatch argument " + quoted(arg) + " is refused: --" + std::string(name)
                    + " is not among the sbatch options a chain may carry";
            }
            if (auto why = verdict(*option, arg, chainOption, chainOptions))
                return why;
            if (option->takes == Takes::Nothing && equals != std::string::npos)
                return "sbatch argument " + quoted(arg) + ": --" + std::string(option->name)
                    + " takes no value";
            if (option->takes == Takes::Value && equals == std::string::npos && ++i == args.size())
                return "sbatch argument " + quoted(arg) + " needs a value";
            continue;
        }

        // A cluster of short options: flags, the last of which may take a value (the rest of the
        // argument, else the next argument), as getopt reads them.
        for (std::size_t at = 1; at < arg.size(); ++at) {
            const char letter = arg[at];
            const Option* option = byLetter(letter);
            if (!option)
                return "sbatch argument " + quoted(arg) + " is refused: -" + std::string(1, letter)
                    + " is not among the sbatch options a chain may carry";
            if (auto why = verdict(*option, arg, chainOption, chainOptions))
                return why;
            if (option->takes == Takes::Nothing)
                continue;
            if (at + 1 == arg.size() && ++i == args.size())
                return "sbatch argument " + quoted(arg) + " needs a value";
            break; // the rest of this argument, or the next one, is the value
        }
    }
    return std::nullopt;
}

namespace {

// The words of one directive line after its magic word, as sbatch (opt.c, _get_argument) splits them:
// at unquoted blanks, with '…' and "…" quoting, a backslash taking the next character as it is (inside
// quotes too: `--wa\it` is --wait), up to an unquoted, unescaped '#'.
std::vector<std::string> directiveWords(std::string_view line)
{
    std::vector<std::string> words;
    std::string word;
    bool inWord = false;
    bool escaped = false;
    char quote = 0;
    for (const char c : line) {
        if (escaped) {
            word += c;
            escaped = false;
            continue;
        }
        if (c == '\\') {
            escaped = true;
            inWord = true;
            continue;
        }
        if (quote) {
            if (c == quote)
                quote = 0;
            else
                word += c;
            continue;
        }
        if (c == '"' || c == '\'') {
            quote = c;
            inWord = true;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '#') {
            if (inWord)
                words.push_back(std::move(word));
            word.clear();
            inWord = false;
            if (c == '#')
                break;
            continue;
        }
        word += c;
        inWord = true;
    }
    if (inWord)
        words.push_back(std::move(word));
    return words;
}

// The directive's words when `line` is one: sbatch obeys lines that begin (in the first column) with
// #SBATCH and, deprecated but still read in 22.05 and 24.11, #SLURM.
std::optional<std::string_view> directiveBody(std::string_view line)
{
    for (const std::string_view magic : { std::string_view("#SBATCH"), std::string_view("#SLURM") })
        if (line.starts_with(magic))
            return line.substr(magic.size());
    return std::nullopt;
}

} // namespace

std::optional<std::string> checkScriptDirectives(std::string_view script)
{
    constexpr std::array<std::string_view, 5> never { "wait", "test-only", "help", "usage", "version" };
    for (std::size_t begin = 0; begin < script.size();) {
        std::size_t end = script.find('\n', begin);
        if (end == std::string_view::npos)
            end = script.size();
        const std::string_view line = script.substr(begin, end - begin);
        begin = end + 1;
        const auto body = directiveBody(line);
        if (!body) {
            const auto first = line.find_first_not_of(" \t\r\v\f");
            if (first == std::string_view::npos || line[first] == '#')
                continue; // blank, the #! line, a comment
            break; // the first command: sbatch reads no further
        }
        const auto words = directiveWords(*body);
        for (std::size_t i = 0; i < words.size(); ++i) {
            const std::string& word = words[i];
            const auto refused = [&](std::string_view option) {
                return "the batch script's directive " + quoted(word) + " is refused: --"
                    + std::string(option) + ": "
                    + std::string(option == "wait" ? "sbatch would wait until the job ends" : noJob);
            };
            if (word.starts_with("--")) {
                const std::string_view name = std::string_view(word).substr(2, word.find('=') - 2);
                // getopt_long takes a unique prefix: any prefix of these may mean them.
                for (const std::string_view option : never)
                    if (!name.empty() && option.starts_with(name))
                        return refused(option);
                const Option* known = byName(name);
                if (known && known->takes == Takes::Value && word.find('=') == std::string::npos)
                    ++i; // its value
                continue;
            }
            if (word.size() < 2 || word.front() != '-')
                continue;
            for (std::size_t at = 1; at < word.size(); ++at) {
                const Option* option = byLetter(word[at]);
                if (!option)
                    continue;
                if (std::find(never.begin(), never.end(), option->name) != never.end())
                    return refused(option->name);
                if (option->takes != Takes::Nothing) {
                    if (at + 1 == word.size())
                        ++i; // its value is the next word
                    break;
                }
            }
        }
    }
    return std::nullopt;
}

} // namespace baton::slurm
