// The `sim` command group end to end on a small synthetic trace, and its answers to bad input.
#include "policy/policy.hpp"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using baton::sim::DecisionRule;
using baton::sim::describeRules;
using baton::sim::ShapeRulesPolicy;
using baton::test::run;
using baton::test::sourceRoot;
using baton::test::TempDir;

namespace {

std::string batonctl()
{
    const char* exe = std::getenv("BATONCTL");
    return exe ? exe : "batonctl";
}

std::string trace()
{
    return (sourceRoot() / "tests/data/sim/synthetic_jobs.csv").string();
}

std::string slurp(const std::filesystem::path& p)
{
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The fields of one CSV line (no quoting: the command's CSVs have none).
std::vector<std::string> fieldsOf(const std::string& line)
{
    std::vector<std::string> fields;
    std::istringstream in(line);
    for (std::string field; std::getline(in, field, ',');)
        fields.push_back(field);
    return fields;
}

std::size_t count(const std::string& text, const std::string& what)
{
    std::size_t n = 0;
    for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1))
        ++n;
    return n;
}

// Each policy's chain efficiency in the CSV: a fraction, at most 1.
void expectChainEfficiencies(const std::string& csv)
{
    std::istringstream rows(csv);
    std::string header, line;
    std::getline(rows, header);
    const std::vector<std::string> names = fieldsOf(header);
    const auto col
        = static_cast<std::size_t>(std::find(names.begin(), names.end(), "chain_efficiency") - names.begin());
    ASSERT_LT(col, names.size()) << header;
    while (std::getline(rows, line)) {
        const std::vector<std::string> f = fieldsOf(line);
        ASSERT_GT(f.size(), col) << line;
        const double efficiency = std::stod(f[col]);
        EXPECT_GT(efficiency, 0) << line;
        EXPECT_LE(efficiency, 1) << line;
    }
}

// A row of candidates.csv: a candidate over all held-out probes or over one size's.
struct Candidate {
    DecisionRule rule;
    std::string nodes;
    double symmetricCost, handoverCost, within, overlap;
};

void readCandidates(const std::filesystem::path& file, std::vector<Candidate>& rows)
{
    std::istringstream candidates(slurp(file));
    std::string line;
    std::getline(candidates, line);
    EXPECT_EQ(line.rfind("rule,value,persist_ticks,nodes,", 0), 0u) << line;
    while (std::getline(candidates, line)) {
        const std::vector<std::string> f = fieldsOf(line);
        ASSERT_EQ(f.size(), 10u) << line;
        ASSERT_TRUE(f[0] == "quantile" || f[0] == "window") << line;
        rows.push_back({ { f[0] == "window" ? DecisionRule::Kind::Window : DecisionRule::Kind::Quantile,
                             std::stod(f[1]), std::stoi(f[2]) },
            f[3], std::stod(f[4]), std::stod(f[5]), std::stod(f[6]), std::stod(f[7]) });
    }
}

// checkpoint-aware's q: the cheapest quantile candidate over all probes within the overlap budget.
void expectCheckpointAwareQ(const std::vector<Candidate>& rows, double budget, const std::string& csv)
{
    double expectedQ = -1, bestCost = 0, leastOverlapQ = -1, leastOverlap = 0;
    for (const Candidate& c : rows) {
        if (c.nodes != "all" || c.rule.kind != DecisionRule::Kind::Quantile)
            continue;
        if (leastOverlapQ < 0 || c.overlap < leastOverlap) {
            leastOverlapQ = c.rule.value;
            leastOverlap = c.overlap;
        }
        if (c.overlap <= budget + 0.001 && (expectedQ < 0 || c.handoverCost < bestCost)) {
            expectedQ = c.rule.value;
            bestCost = c.handoverCost;
        }
    }
    const auto at = csv.find("\ncheckpoint-aware,");
    ASSERT_NE(at, std::string::npos) << csv;
    EXPECT_NEAR(std::stod(csv.substr(at + 18)), expectedQ >= 0 ? expectedQ : leastOverlapQ, 1e-9) << csv;
}

// predict's rule for each size: the most within the tolerance among that size's candidates, of
// either rule, with at most 1800 s of mean overlap (ties: the lower symmetric cost).
void expectPredictRules(const std::vector<Candidate>& rows, const std::string& csv, const std::string& output)
{
    std::vector<ShapeRulesPolicy::ForShape> expectedRules;
    for (int nodes : { 1, 4 }) {
        const Candidate* best = nullptr;
        for (const Candidate& c : rows)
            if (c.nodes == std::to_string(nodes) && c.overlap <= 1800
                && (!best || c.within > best->within
                    || (c.within == best->within && c.symmetricCost < best->symmetricCost)))
                best = &c;
        ASSERT_NE(best, nullptr) << nodes;
        expectedRules.push_back({ nodes, best->rule });
    }
    EXPECT_NE(csv.find("\npredict,," + describeRules(expectedRules) + ","), std::string::npos) << csv;
    EXPECT_NE(output.find("predict's rules: " + describeRules(expectedRules)), std::string::npos) << output;
    EXPECT_NE(output.find("predict: per probe size, the quantile or window rule with the most within 600 s"),
        std::string::npos)
        << output;
}

// With one quantile rule: predict's q is the most within over all probes, among quantiles only.
void expectQuantilePredict(const std::filesystem::path& out, const std::string& output)
{
    std::istringstream candidates(slurp(out / "candidates.csv"));
    std::string line;
    std::getline(candidates, line);
    double predictQ = -1, predictWithin = 0, predictCost = 0;
    std::size_t count = 0;
    while (std::getline(candidates, line)) {
        const std::vector<std::string> f = fieldsOf(line);
        ASSERT_EQ(f.size(), 10u) << line;
        EXPECT_EQ(f[0], "quantile");
        EXPECT_EQ(f[3], "all");
        ++count;
        const double within = std::stod(f[6]), cost = std::stod(f[4]);
        if (std::stod(f[7]) <= 1800
            && (predictQ < 0 || within > predictWithin || (within == predictWithin && cost < predictCost))) {
            predictQ = std::stod(f[1]);
            predictWithin = within;
            predictCost = cost;
        }
    }
    EXPECT_EQ(count, 20u);
    const auto quantileCsv = slurp(out / "compare.csv");
    const auto predictAt = quantileCsv.find("\npredict,");
    ASSERT_NE(predictAt, std::string::npos) << quantileCsv;
    ASSERT_GE(predictQ, 0) << "a candidate within the overlap bound";
    EXPECT_NEAR(std::stod(quantileCsv.substr(predictAt + 9)), predictQ, 1e-9) << quantileCsv;
    EXPECT_NE(output.find("predict: q with the most within 600 s"), std::string::npos) << output;
}

} // namespace

TEST(SimCommand, CompareWritesTableCsvAndPlotThenRunReusesTheModel)
{
    TempDir dir("baton-sim-cli");
    const auto out = (dir.path() / "out").string();
    const auto model = (dir.path() / "model.json").string();
    const auto r = run({ batonctl(), "sim", "compare", "--trace", trace(), "--nodes", "16", "--shapes", "1,4",
        "--interval-hours", "6", "--out", out, "--save-model", model });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    for (const char* policy : { "reactive", "avg", "predict", "checkpoint-aware" })
        EXPECT_NE(r.output.find(policy), std::string::npos) << r.output;
    const auto csv = slurp(dir.path() / "out/compare.csv");
    EXPECT_EQ(count(csv, "\n"), 5u) << csv; // header + 4 policies
    const auto svg = slurp(dir.path() / "out/interruptions.svg");
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_EQ(count(svg, "<polyline"), 4u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    EXPECT_GT(count(slurp(dir.path() / "out/interruptions.csv"), "\n"), 4u);

    // The chain table, and each policy's chain efficiency in the CSV.
    EXPECT_NE(r.output.find("chains: 7 days of compute as 48 h jobs"), std::string::npos) << r.output;
    ASSERT_NO_FATAL_FAILURE(expectChainEfficiencies(csv));

    // checkpoint-aware's q is the cheapest held-out candidate within the overlap budget (default: avg's
    // overlap on the same held-out probes, printed).
    const auto budgetAt = r.output.find("checkpoint-aware: overlap budget ");
    ASSERT_NE(budgetAt, std::string::npos) << r.output;
    const double budget = std::stod(r.output.substr(budgetAt + 33));
    EXPECT_NE(r.output.find("(avg's mean overlap on the held-out training probes)"), std::string::npos);
    // candidates.csv: every candidate over all held-out probes, then over each size's.
    std::vector<Candidate> rows;
    ASSERT_NO_FATAL_FAILURE(readCandidates(dir.path() / "out/candidates.csv", rows));
    EXPECT_EQ(rows.size(), 3 * 32u) << "20 quantiles and 12 windows, over all probes and each of 2 sizes";
    ASSERT_NO_FATAL_FAILURE(expectCheckpointAwareQ(rows, budget, csv));
    ASSERT_NO_FATAL_FAILURE(expectPredictRules(rows, csv, r.output));

    const auto one = run({ batonctl(), "sim", "compare", "--trace", trace(), "--nodes", "16", "--shapes",
        "1,4", "--interval-hours", "6", "--out", out, "--model", model, "--chain-days", "0", "--predict-rule",
        "quantile" });
    ASSERT_EQ(one.exitCode, 0) << one.output;
    ASSERT_NO_FATAL_FAILURE(expectQuantilePredict(dir.path() / "out", one.output));

    const auto again = run({ batonctl(), "sim", "run", "--trace", trace(), "--nodes", "16", "--shapes", "1,4",
        "--interval-hours", "6", "--policy", "predict", "--model", model, "--chain-days", "0" });
    ASSERT_EQ(again.exitCode, 0) << again.output;
    EXPECT_NE(again.output.find("predict"), std::string::npos);
}

TEST(SimCommand, TrainsThePredictorRelativeToTheRecentWait)
{
    baton::test::TempDir dir("baton-sim-cmd");
    const auto out = (dir.path() / "out").string();
    const auto r = run({ batonctl(), "sim", "compare", "--trace", trace(), "--nodes", "16", "--shapes", "1",
        "--interval-hours", "12", "--chain-days", "0", "--sample-every-hours", "1", "--wait-offset", "recent",
        "--out", out });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("; relative to the recent mean wait"), std::string::npos) << r.output;
    std::ifstream model(dir.path() / "out/wait-predictor.json");
    const auto doc = nlohmann::json::parse(model);
    EXPECT_EQ(doc["version"], 2);
    EXPECT_EQ(doc["offset"], "recent_mean_wait");
    // A run with that model says what it is relative to, whatever the run's own training option.
    const auto again = run({ batonctl(), "sim", "run", "--trace", trace(), "--nodes", "16", "--shapes", "1",
        "--interval-hours", "12", "--chain-days", "0", "--policy", "predict", "--model",
        (dir.path() / "out/wait-predictor.json").string() });
    ASSERT_EQ(again.exitCode, 0) << again.output;
    EXPECT_NE(again.output.find("; relative to the recent mean wait"), std::string::npos) << again.output;
}

TEST(SimCommand, RunsTheHindsightBound)
{
    // The bound simulates the queue once per minute of every probe: few probes keep it quick.
    const auto r = run({ batonctl(), "sim", "run", "--trace", trace(), "--nodes", "16", "--shapes", "1",
        "--interval-hours", "240", "--policy", "oracle" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto at = r.output.find("\noracle ");
    ASSERT_NE(at, std::string::npos) << r.output;
    std::istringstream row(r.output.substr(at + 1));
    std::string name, q, persist;
    std::size_t probes = 0;
    row >> name >> q >> persist >> probes;
    EXPECT_GT(probes, 0u) << r.output;
}

TEST(SimCommand, SuccessorTimeMinReportsTheGrantedLimits)
{
    const auto r = run({ batonctl(), "sim", "run", "--trace", trace(), "--nodes", "16", "--shapes", "1,4",
        "--interval-hours", "6", "--policy", "reactive", "--successor-time-min-hours", "1", "--chain-days",
        "0" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("successors with --time-min 1 h"), std::string::npos) << r.output;
    const auto at = r.output.find("\nreactive ");
    ASSERT_NE(at, std::string::npos) << r.output;
    std::istringstream row(r.output.substr(at + 1, r.output.find('\n', at + 1) - at - 1));
    std::vector<std::string> fields;
    for (std::string f; row >> f;)
        fields.push_back(f);
    ASSERT_EQ(fields.size(), 16u) << r.output; // the usual 14 columns, then short% and limit(h)
    const double shortened = std::stod(fields[14]), grantedHours = std::stod(fields[15]);
    EXPECT_GE(shortened, 0);
    EXPECT_LE(shortened, 100);
    EXPECT_GE(grantedHours, 1);
    EXPECT_LE(grantedHours, 48);
}

TEST(SimCommand, FitPrintsTheBestConfiguration)
{
    const auto r = run({ batonctl(), "sim", "fit", "--trace", trace(), "--nodes", "12,16" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("best fit"), std::string::npos);
}

// --backfill reaches the replay: the schedule of sim_simulator_test's conservative case, where job 5
// (1 node, 350 s, submitted at 3) starts at once under EASY, and after job 4's reservation under a plan
// for every blocked job (conservative) or with no backfill; Slurm started it at 400.
TEST(SimCommand, FitReplaysWithTheBackfillGiven)
{
    TempDir dir("baton-sim-cli");
    const auto jobs = dir.path() / "jobs.csv";
    std::ofstream(jobs) << "id,submit,run_time,limit,nodes,priority,recorded_start,after\n"
                           "1,0,100,100,4,,0,\n2,0,300,300,2,,0,\n3,1,100,100,4,,100,\n"
                           "4,2,100,100,8,,300,\n5,3,350,350,1,,400,\n";
    const auto waitOfJob5 = [&](const std::string& backfill) {
        const auto residuals = dir.path() / ("residuals-" + backfill + ".csv");
        const auto r = run({ batonctl(), "sim", "fit", "--trace", jobs.string(), "--nodes", "8", "--unit",
            "nodes", "--weights", "0/0/0", "--warmup-hours", "0", "--backfill", backfill, "--residuals",
            residuals.string() });
        EXPECT_EQ(r.exitCode, 0) << r.output;
        std::istringstream in(slurp(residuals));
        for (std::string line; std::getline(in, line);)
            if (line.starts_with("(none),5,"))
                return line.substr(line.rfind(',') + 1);
        return std::string("missing");
    };
    EXPECT_EQ(waitOfJob5("easy"), "0");
    EXPECT_EQ(waitOfJob5("conservative"), "397");
    EXPECT_EQ(waitOfJob5("none"), "397");
}

// The line after "best fit for partition NAME ...:", split into its fields.
std::vector<std::string> bestFitFields(const std::string& output, const std::string& partition)
{
    const auto at = output.find("best fit for partition " + partition + " ");
    if (at == std::string::npos)
        return {};
    const auto begin = output.find('\n', at) + 1;
    std::istringstream line(output.substr(begin, output.find('\n', begin) - begin));
    std::vector<std::string> fields;
    for (std::string f; line >> f;)
        fields.push_back(f);
    return fields;
}

TEST(SimCommand, FitsEachPartitionAndWarnsOnlyOnThePoorOne)
{
    // Partition 1 ran whole-machine jobs first come first served: its replay matches exactly.
    // Partition 2's recorded waits are unrelated to its load: the fit is poor and says so.
    const auto swf = (sourceRoot() / "tests/data/sim/partitions.swf").string();
    const auto r = run({ batonctl(), "sim", "fit", "--trace", swf });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto one = bestFitFields(r.output, "1");
    ASSERT_EQ(one.size(), 13u) << r.output;
    EXPECT_EQ(one[0], "16") << r.output; // cores: the recorded peak
    EXPECT_EQ(one[1], "1") << r.output; // the 20-processor job never fits
    EXPECT_EQ(one[8], "1.000") << r.output; // correlation
    EXPECT_EQ(one[9], "1.000") << r.output; // log correlation
    EXPECT_EQ(bestFitFields(r.output, "2").size(), 13u) << r.output;
    EXPECT_EQ(r.output.find("WARNING: partition 1"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("WARNING: partition 2 fits poorly: correlation of log waits 0.000 < 0.30"),
        std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("1 of 2 partitions fit poorly"), std::string::npos) << r.output;

    // One partition on request; a stricter threshold warns about it too.
    const auto only
        = run({ batonctl(), "sim", "fit", "--trace", swf, "--partition", "1", "--warn-below", "1.01" });
    ASSERT_EQ(only.exitCode, 0) << only.output;
    EXPECT_EQ(only.output.find("partition 2"), std::string::npos) << only.output;
    EXPECT_NE(only.output.find("WARNING: partition 1 fits poorly"), std::string::npos) << only.output;
}

TEST(SimCommand, FitTriesTheWeightsGiven)
{
    const auto r = run({ batonctl(), "sim", "fit", "--trace", trace(), "--nodes", "12,16", "--weights",
        "0/0/0,1000/0/0, 100/0/1000" });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    // One row per size and weight triple: fields nodes, neverfit, age, size, prio, ...
    std::istringstream lines(r.output);
    std::vector<std::string> tried;
    for (std::string line; std::getline(lines, line);) {
        std::istringstream in(line);
        std::vector<std::string> f;
        for (std::string v; in >> v;)
            f.push_back(v);
        if (f.size() == 13 && (f[0] == "12" || f[0] == "16"))
            tried.push_back(f[0] + ":" + f[2] + "/" + f[3] + "/" + f[4]);
    }
    tried.pop_back(); // the best fit, printed again
    EXPECT_EQ(tried,
        (std::vector<std::string> {
            "12:0/0/0", "12:1000/0/0", "12:100/0/1000", "16:0/0/0", "16:1000/0/0", "16:100/0/1000" }))
        << r.output;
}

TEST(SimCommand, FitWritesEachComparedJobsRecordedAndSimulatedWait)
{
    TempDir dir("baton-sim-cli");
    const auto swf = (sourceRoot() / "tests/data/sim/partitions.swf").string();
    const auto csv = dir.path() / "residuals.csv";
    const auto r = run({ batonctl(), "sim", "fit", "--trace", swf, "--residuals", csv.string() });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    std::istringstream in(slurp(csv));
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(line, "partition,id,user,units,submit,limit_s,run_time_s,recorded_wait_s,simulated_wait_s");
    std::map<std::string, int> rows, exact;
    while (std::getline(in, line)) {
        const std::vector<std::string> f = fieldsOf(line);
        ASSERT_EQ(f.size(), 9u) << line;
        ++rows[f[0]];
        exact[f[0]] += f[7] == f[8] ? 1 : 0;
    }
    // One row per compared job (the best fit's "jobs" column); partition 1 replays exactly, partition
    // 2's recorded waits are unrelated to its load.
    const auto one = bestFitFields(r.output, "1");
    const auto two = bestFitFields(r.output, "2");
    ASSERT_EQ(one.size(), 13u) << r.output;
    ASSERT_EQ(two.size(), 13u) << r.output;
    EXPECT_EQ(rows["1"], std::stoi(one[5]));
    EXPECT_GT(rows["1"], 0);
    EXPECT_EQ(exact["1"], rows["1"]);
    EXPECT_EQ(rows["2"], std::stoi(two[5]));
    EXPECT_LT(exact["2"], rows["2"]);

    const auto bad = run({ batonctl(), "sim", "fit", "--trace", swf, "--residuals",
        (dir.path() / "absent" / "residuals.csv").string() });
    EXPECT_NE(bad.exitCode, 0) << bad.output;
    EXPECT_NE(bad.output.find("cannot write"), std::string::npos) << bad.output;
}

TEST(SimCommand, CompareCountsJobsThatNeverFitInTheChosenUnit)
{
    TempDir dir("baton-sim-cli");
    const auto swf = (sourceRoot() / "tests/data/sim/partitions.swf").string();
    const auto cores = run({ batonctl(), "sim", "run", "--trace", swf, "--shapes", "4,16", "--interval-hours",
        "6", "--policy", "reactive" });
    ASSERT_EQ(cores.exitCode, 0) << cores.output;
    EXPECT_NE(cores.output.find("replaying 1 (121 jobs; --partition chooses)"), std::string::npos)
        << cores.output;
    EXPECT_NE(cores.output.find("cluster 16 cores, partition 1 (left out, larger than the cluster: 1 jobs)"),
        std::string::npos)
        << cores.output;
    const auto nodes = run({ batonctl(), "sim", "run", "--trace", swf, "--unit", "nodes", "--partition", "1",
        "--shapes", "1,4", "--interval-hours", "6", "--policy", "reactive" });
    ASSERT_EQ(nodes.exitCode, 0) << nodes.output;
    // 20 processors are 5 nodes of 4: still more than the machine's 4.
    EXPECT_NE(nodes.output.find("cluster 4 nodes, partition 1 (left out, larger than the cluster: 1 jobs)"),
        std::string::npos)
        << nodes.output;
    const auto absent
        = run({ batonctl(), "sim", "run", "--trace", swf, "--partition", "7", "--policy", "reactive" });
    EXPECT_EQ(absent.exitCode, 2) << absent.output;
    EXPECT_NE(
        absent.output.find("--partition: '7' is not in the trace (partitions: 1, 2)"), std::string::npos)
        << absent.output;
    const auto gpus
        = run({ batonctl(), "sim", "run", "--trace", swf, "--unit", "gpus", "--policy", "reactive" });
    EXPECT_EQ(gpus.exitCode, 2) << gpus.output;
    EXPECT_NE(gpus.output.find("an SWF trace has no GPU counts"), std::string::npos) << gpus.output;
    // The job CSV counts nodes only; a sacct trace of node counts needs the node size for GPUs.
    const auto csvCores
        = run({ batonctl(), "sim", "run", "--trace", trace(), "--unit", "cores", "--policy", "reactive" });
    EXPECT_EQ(csvCores.exitCode, 2) << csvCores.output;
    EXPECT_NE(csvCores.output.find("the job CSV counts nodes only"), std::string::npos) << csvCores.output;
    TempDir sacctDir("baton-sim-cli");
    const auto sacct = sacctDir.path() / "nodes.txt";
    std::ofstream(sacct)
        << "JobID|User|Submit|Start|End|Timelimit|NNodes\n"
           "1|alice|2024-01-01T00:00:00|2024-01-01T00:00:10|2024-01-01T01:00:10|02:00:00|2\n";
    const auto noSize = run({ batonctl(), "sim", "fit", "--trace", sacct.string(), "--unit", "gpus" });
    EXPECT_EQ(noSize.exitCode, 2) << noSize.output;
    EXPECT_NE(noSize.output.find("the trace gives no GPU counts; give --gpus-per-node"), std::string::npos)
        << noSize.output;
}

TEST(SimCommand, BadInputGivesClearErrors)
{
    TempDir dir("baton-sim-cli");
    auto expectFailure = [](const std::vector<std::string>& argv, int code, const std::string& message) {
        const auto r = run(argv);
        EXPECT_EQ(r.exitCode, code) << r.output;
        EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    };
    expectFailure(
        { batonctl(), "sim", "run", "--trace", trace(), "--policy", "clairvoyant" }, 2, "unknown policy");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--colour", "red" }, 2,
        "unknown option --colour");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--nodes", "many" }, 2, "not a number");
    expectFailure(
        { batonctl(), "sim", "compare", "--trace", (dir.path() / "absent.csv").string() }, 1, "cannot open");
    expectFailure({ batonctl(), "sim", "frobnicate" }, 2, "unknown command");
    for (const auto* weights : { "1/2", "1/2/x", "1/2/-3", "1/2/3/", "," })
        expectFailure({ batonctl(), "sim", "fit", "--trace", trace(), "--nodes", "16", "--weights", weights },
            2, "--weights:");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--oracle", "maybe" }, 2,
        "--oracle: expected yes or no");
    expectFailure(
        { batonctl(), "sim", "compare", "--trace", trace(), "--rl", "maybe" }, 2, "--rl: expected yes or no");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--chain-days", "-1" }, 2,
        "--chain-days must lie between 0 and 365");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--overlap-budget-seconds", "lots" }, 2,
        "not a number");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--overlap-budget-seconds", "-5" }, 2,
        "not negative");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--successor-time-min-hours", "49" }, 2,
        "--successor-time-min-hours must lie between 0 and the limit (48 h)");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--predict-objective", "median" }, 2,
        "--predict-objective must be within or mean, not 'median'");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--predict-overlap-seconds", "-1" }, 2,
        "--predict-overlap-seconds must not be negative");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--wait-offset", "yesterday" }, 2,
        "--wait-offset must be none or recent, not 'yesterday'");
    for (const char* every : { "0", "0.01" }) // none; 36 s, not a multiple of the 60-s tick
        expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--sample-every-hours", every }, 2,
            "--sample-every-hours must be a positive multiple of --tick-seconds");
    for (const auto* command : { "fit", "compare" }) {
        expectFailure({ batonctl(), "sim", command, "--trace", trace(), "--nodes", "16", "--held-age-from",
                          "eligible" },
            2, "--held-age-from must be submit or end, not 'eligible'");
        expectFailure(
            { batonctl(), "sim", command, "--trace", trace(), "--nodes", "16", "--backfill", "aggressive" },
            2, "--backfill must be easy, conservative or none, not 'aggressive'");
    }

    const auto bad = dir.path() / "bad.csv";
    std::ofstream(bad) << "id,submit,run_time,limit,nodes\n1,100,10,20,1\n2,abc,10,20,1\n";
    expectFailure({ batonctl(), "sim", "compare", "--trace", bad.string() }, 1, "bad.csv:3");
    expectFailure(
        { batonctl(), "sim", "compare", "--trace", trace(), "--model", bad.string() }, 1, "not a model file");
}

// A trace of a few days needs a shorter warm-up and shorter probe jobs than ls6's week and 48 h: both
// are options, and the chain and the time-min check follow the limit given.
// --handovers: every simulated chain's successors, for comparing a policy's decisions with a live run's.
// reactive submits at its predecessor's limit, and the predecessor runs to it.
TEST(SimCommand, RunWritesEachSimulatedChainsHandovers)
{
    TempDir dir("baton-sim-cli");
    const auto path = dir.path() / "handovers.csv";
    const std::vector<std::string> argv { batonctl(), "sim", "run", "--trace", trace(), "--nodes", "16",
        "--shapes", "1", "--interval-hours", "12", "--warmup-hours", "24", "--limit-hours", "6",
        "--chain-days", "1", "--policy", "reactive" };
    auto withFile = argv;
    withFile.insert(withFile.end(), { "--handovers", path.string() });
    const auto r = run(withFile);
    ASSERT_EQ(r.exitCode, 0) << r.output;
    std::istringstream csv(slurp(path));
    std::string line;
    std::getline(csv, line);
    EXPECT_EQ(line, "policy,chain,job,submitted,started,predecessor_limit_end,predecessor_end");
    std::size_t rows = 0;
    int lastChain = 0, lastJob = 0;
    while (std::getline(csv, line)) {
        std::replace(line.begin(), line.end(), ',', ' ');
        std::istringstream fields(line);
        std::string policy;
        int chain = 0, job = 0;
        std::int64_t submitted = 0, started = 0, limitEnd = 0, end = 0;
        ASSERT_TRUE(fields >> policy >> chain >> job >> submitted >> started >> limitEnd >> end) << line;
        EXPECT_EQ(policy, "reactive");
        EXPECT_EQ(job, chain == lastChain ? lastJob + 1 : 2) << line; // a chain's successors in order
        EXPECT_EQ(submitted, limitEnd) << line;
        EXPECT_EQ(end, limitEnd) << line;
        EXPECT_GE(started, submitted) << line;
        lastChain = chain;
        lastJob = job;
        ++rows;
    }
    EXPECT_GE(rows, 3u) << "a day of compute in 6 h jobs needs at least three successors per chain";

    auto unwritable = argv;
    unwritable.insert(unwritable.end(), { "--handovers", (dir.path() / "missing/handovers.csv").string() });
    const auto failed = run(unwritable);
    EXPECT_EQ(failed.exitCode, 1) << failed.output;
    EXPECT_NE(failed.output.find("cannot write"), std::string::npos) << failed.output;
}

TEST(SimCommand, WarmupAndLimitForShortTraces)
{
    TempDir dir("baton-sim-cli");
    const auto out = (dir.path() / "out").string();
    const auto r = run({ batonctl(), "sim", "compare", "--trace", trace(), "--nodes", "16", "--shapes", "1,4",
        "--interval-hours", "6", "--warmup-hours", "24", "--limit-hours", "6", "--chain-days", "1", "--out",
        out });
    ASSERT_EQ(r.exitCode, 0) << r.output;
    // The trace has no recorded starts: the warm-up runs from its first submission, 2020-09-13 12:39.
    EXPECT_NE(r.output.find("warm-up until 2020-09-14 12:39"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("chains: 1 days of compute as 6 h jobs"), std::string::npos) << r.output;
    // The small Eagle CSV spans a day: after a week's warm-up no job is left to compare; without one,
    // the partition's jobs submitted at or after its first recorded start are (two of its three; the
    // jobs column of the best fit).
    const auto eagle = (sourceRoot() / "tests/data/eagle_small.csv").string();
    const auto jobsCompared = [&](const std::vector<std::string>& extra) {
        std::vector<std::string> argv { batonctl(), "sim", "fit", "--trace", eagle, "--partition", "short",
            "--nodes", "8" };
        argv.insert(argv.end(), extra.begin(), extra.end());
        const auto fit = run(argv);
        EXPECT_EQ(fit.exitCode, 0) << fit.output;
        const auto fields = bestFitFields(fit.output, "short");
        return fields.size() > 5 ? std::stoi(fields[5]) : -1;
    };
    EXPECT_EQ(jobsCompared({}), 0);
    EXPECT_EQ(jobsCompared({ "--warmup-hours", "0" }), 2);

    const auto expectFailure = [](const std::vector<std::string>& argv, const std::string& message) {
        const auto failed = run(argv);
        EXPECT_EQ(failed.exitCode, 2) << failed.output;
        EXPECT_NE(failed.output.find(message), std::string::npos) << failed.output;
    };
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--limit-hours", "0" },
        "--limit-hours must be at least a minute");
    expectFailure({ batonctl(), "sim", "fit", "--trace", trace(), "--nodes", "16", "--warmup-hours", "-1" },
        "--warmup-hours must not be negative");
    expectFailure({ batonctl(), "sim", "compare", "--trace", trace(), "--limit-hours", "6",
                      "--successor-time-min-hours", "7" },
        "between 0 and the limit (6 h)");
}
