#include "sim_command.hpp"

#include "command.hpp"

#include <iostream>
#include <stdexcept>

namespace baton::sim::cli {

namespace {

// Declarations of the three commands' options; their --help is generated from these.
void addUnitOptions(ctl::CommandSpec& spec)
{
    spec.option("unit", "auto|nodes|cores|gpus",
            "what the simulated cluster allocates; auto: nodes, or cores for SWF\n"
            "(its only size is a processor count)",
            "auto")
        .option("cores-per-node", "N", "node size in cores (SWF: MaxProcs / MaxNodes of its header)", "0")
        .option("gpus-per-node", "N", "node size in GPUs, for --unit gpus with a trace of node counts", "0")
        .option("partition", "NAME",
            "replay this partition only (each partition is its own pool of nodes)\n"
            "and place the probes in it (default: the partition with most jobs)")
        .option("user-running-jobs", "N", "at most N running jobs per user (QOS MaxJobsPerUser)", "0")
        .option("user-running-units", "N", "at most N units held per user (QOS MaxTRESPerUser)", "0")
        .option("held-age-from", "submit|end",
            "a job held by a dependency ages from its submission (Slurm's\n"
            "PriorityFlags=ACCRUE_ALWAYS) or from its predecessor's end (Slurm's default)",
            "submit")
        .option("backfill", "easy|conservative|none",
            "easy: only the first job that does not fit holds a reservation; conservative:\n"
            "every one does, and a job starts ahead only if it delays none (Slurm's\n"
            "sched/backfill); none: strictly in priority order",
            "easy")
        .option("priority-period-seconds", "S",
            "the order is by age as of the last of Slurm's priority computations, every\n"
            "S s (PriorityCalcPeriod; 0: continuously)",
            "0")
        .option("infer-dependencies-seconds", "S",
            "a job that started within S s of the end of another job of its user,\n"
            "submitted before that end, waits for it (0: off)",
            "0");
}

void addSchedulerOptions(ctl::CommandSpec& spec)
{
    spec.option("trace", "FILE", "the job trace file; required")
        .option("nodes", "N", "cluster size in nodes (an SWF trace: its header's MaxNodes)", "74")
        .option("age-weight", "W", "priority weight of age", "100")
        .option("size-weight", "W", "priority weight of job size", "10")
        .option("priority-weight", "W", "priority weight of the trace's recorded priority", "1000")
        .option("max-age-days", "D", "age at which the age factor saturates", "7");
    addUnitOptions(spec);
}

void addComparisonOptions(ctl::CommandSpec& spec)
{
    spec.option("split", "YYYY-MM-DD", "train before, evaluate after (default: the middle of the trace)")
        .option("warmup-hours", "H", "no probe in the first H hours after the first recorded start", "168")
        .option("limit-hours", "H",
            "limit of the probe jobs and of the chain's jobs; a trace of a few days\n"
            "needs jobs shorter than Mirage's 48 h",
            "48")
        .option("interval-hours", "H", "spacing of probes", "4")
        .option("tick-seconds", "S", "how often the policies decide (batond's --tick-seconds)", "60")
        .option("sample-every-hours", "H",
            "the predictor's training rows: a successor's wait every H hours of each\n"
            "training probe's predecessor run, from its start (a multiple of the tick)",
            "3")
        .option("submit-lead-seconds", "S",
            "batond's --submit-lead-seconds: every policy but reactive submits by S s\n"
            "before the limit at the latest, S at most half the limit (0: Mirage's protocol)",
            "0")
        .option("shapes", "N,N", "node counts of probe chains", "1,8")
        .option("tolerance-seconds", "S", "\"within\" tolerance", "600")
        .option("handover-seconds", "S", "price of one handover checkpoint, snapshot + persist", "60")
        .option("successor-time-min-hours", "H",
            "submit successors with Slurm's --time-min H: backfill may start one with\n"
            "a limit cut to as little as H (0: the full limit, Mirage's protocol)",
            "0")
        .option("predict-objective", "within|mean",
            "predict's q on the held-out training probes: the most successors within\n"
            "the tolerance (mean overlap <= --predict-overlap-seconds), or Mirage's\n"
            "least mean |interruption|",
            "within")
        .option("predict-overlap-seconds", "S", "predict (within): bound on the mean early start", "1800")
        .option("predict-rule", "per-size|quantile",
            "predict (within): per probe size, the best on the held-out probes of the\n"
            "quantile rule and the window rule (submit when the chance of a start within\n"
            "the tolerance of the predecessor's end reaches tau); or one quantile rule",
            "per-size")
        .option("overlap-budget-seconds", "S|avg",
            "checkpoint-aware: bound on its quantile rule's mean early start on the\n"
            "held-out training probes (it also submits wherever avg would); avg: the\n"
            "overlap Mirage's avg spends on them",
            "avg")
        .option("chain-days", "D",
            "chain efficiency: a training of D days of compute as limit-length jobs from\n"
            "every probe moment, one chain per policy (0: skip)",
            "7")
        .option("successors-in-flight", "N",
            "chains: successors kept in the queue at once (1 or 2; with 2, while one waits\n"
            "the policy decides on the next as for a predecessor ending one limit later)",
            "1")
        .option("handovers", "FILE",
            "write every simulated chain's successors (policy, chain, job, submitted, started,\n"
            "the predecessor's limit and end; epoch seconds) as CSV")
        .option("model", "FILE", "use this trained predictor instead of training one")
        .option("save-model", "FILE",
            "write the trained predictor here (compare: default DIR/wait-predictor.json)")
        .option("db-model", "NAME",
            "use the latest version of this predictor from the database's models table, and the "
            "learned policies' rules stored with it (as batond does)")
        .option(
            "db-save", "NAME", "store the trained predictor, with its metrics, as the next version of NAME")
        .option("database", "CONNINFO", "for --db-*: else $BATON_DATABASE, else the PG* environment")
        .option("seed", "N", "training seed", "0")
        .option("wait-offset", "none|recent",
            "what the trained predictor's trees predict the log-wait relative to: nothing,\n"
            "or the queue's recent mean wait (its predictions then follow a queue that\n"
            "grows beyond anything in the training period)",
            "none");
}

const std::vector<ctl::Subcommand>& simCommands()
{
    static const std::vector<ctl::Subcommand> commands = [] {
        ctl::CommandSpec fit("batonctl sim fit",
            "Replay each partition of the trace for each cluster size and priority weighting;\n"
            "compare with the recorded starts; warn when the best fit is poor.");
        fit.option("trace", "FILE", "the job trace; required")
            .option("nodes", "N,N,...|auto",
                "cluster sizes to try, in nodes; auto: per partition, the recorded peak use\n"
                "and 2.5 .. 15 % below it (no recorded starts: the SWF header's size)",
                "auto")
            .option("warn-below", "R", "warn when the best fit's correlation of log waits is below R", "0.3")
            .option("weights", "A/S/P,...",
                "age/size/priority weights to try instead of the built-in six\n"
                "(1000/0/0, 1000/100/0, 1000/1000/0, 0/0/1000, 1000/100/1000, 100/10/1000)")
            .option("residuals", "FILE",
                "write every compared job's recorded and simulated wait under the best\n"
                "fit of its partition (CSV)")
            .option("max-age-days", "D", "age at which the age factor saturates", "7")
            .option("warmup-hours", "H",
                "jobs submitted in the first H hours after the first recorded start are not\n"
                "compared (the queue fills up); a trace of a few days needs less than a week",
                "168");
        addUnitOptions(fit);
        ctl::CommandSpec run(
            "batonctl sim run", "Evaluate one policy with Mirage's protocol; print a table.");
        addSchedulerOptions(run);
        addComparisonOptions(run);
        run.option(
            "policy", "POLICY", "reactive|avg|predict|checkpoint-aware|policy-gradient|oracle; required");
        ctl::CommandSpec compare("batonctl sim compare",
            "Evaluate the policies with Mirage's protocol; print a table, write DIR/compare.csv,\n"
            "DIR/interruptions.csv and DIR/interruptions.svg.");
        addSchedulerOptions(compare);
        addComparisonOptions(compare);
        compare.option("out", "DIR", "where to write the results", "sim-compare")
            .option("rl", "yes|no",
                "add the policy-gradient policy (Mirage's RL), trained on the training period\n"
                "(slow: one queue simulation per 10 min of each training probe's last 24 h)",
                "no")
            .option("oracle", "yes|no",
                "add the hindsight bound, the best submission minute of each probe found by\n"
                "trying every one (slow: one queue simulation per minute)",
                "no");
        return std::vector<ctl::Subcommand> {
            { fit, [](const ctl::ParsedCommand& o) { return fitCommand(o); } },
            { run,
                [](const ctl::ParsedCommand& o) {
                    const auto policy = o.text("policy");
                    if (policy.empty())
                        throw std::invalid_argument("--policy is required");
                    return compareCommand(o, { policy }, false);
                } },
            { compare,
                [](const ctl::ParsedCommand& o) {
                    std::vector<std::string> policies { sim::livePolicyNames.begin(),
                        sim::livePolicyNames.end() };
                    const auto oracle = o.text("oracle");
                    if (oracle != "yes" && oracle != "no")
                        throw std::invalid_argument("--oracle: expected yes or no, got '" + oracle + "'");
                    const auto rl = o.text("rl");
                    if (rl != "yes" && rl != "no")
                        throw std::invalid_argument("--rl: expected yes or no, got '" + rl + "'");
                    if (rl == "yes")
                        policies.push_back("policy-gradient");
                    if (oracle == "yes")
                        policies.push_back("oracle");
                    return compareCommand(o, std::move(policies), true);
                } },
        };
    }();
    return commands;
}

} // namespace

} // namespace baton::sim::cli

namespace baton::ctl {

int simCommand(std::span<const std::string> args)
{
    try {
        return dispatch(
            "batonctl sim", "Queue simulator and provisioning policies.", sim::cli::simCommands(), args);
    } catch (const UsageError&) {
        throw; // batonctl prints it with the command's --help hint
    } catch (const std::invalid_argument& e) {
        std::cerr << "sim: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "sim: " << e.what() << '\n';
        return 1;
    }
}

} // namespace baton::ctl
