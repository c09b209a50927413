#include "sim_command.hpp"

#include "policy/model_store.hpp"
#include "svg_plot.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>

namespace baton::sim::cli {

namespace {

// The hindsight bound's fraction within the tolerance, when the comparison has it.
std::optional<double> boundWithin(const Comparison& r)
{
    for (const auto& row : r.rows)
        if (row.name == "oracle" && row.metrics.count > 0)
            return row.metrics.fractionWithin;
    return std::nullopt;
}

// A policy's fraction within the tolerance over the hindsight bound's, measured on the same probes:
// the restated target is >= 0.9.
std::optional<double> ratioToBound(const Comparison& r, const PolicyRow& row)
{
    const auto bound = boundWithin(r);
    if (!bound || *bound <= 0)
        return std::nullopt;
    return row.metrics.fractionWithin / *bound;
}

void printChainTable(const Comparison& r, const ComparisonConfig& config, std::ostream& out)
{
    out << "chains: " << config.chain.compute / 86400.0 << " days of compute as "
        << config.protocol.limit / 3600.0 << " h jobs from each probe moment before "
        << formatDate(std::min(config.evaluationEnd, config.chainEnd)) << " (" << r.chainStarts
        << " per policy); handover " << config.chain.handover << " s"
        << (config.chain.successorsInFlight > 1 ? "; two successors in flight" : "") << '\n';
    char line[256];
    std::snprintf(line, sizeof line, "%-17s %7s %11s %9s %6s %12s %10s", "policy", "chains", "efficiency%",
        "worst%", "jobs", "idle(node-h)", "unfinished");
    out << line << '\n';
    for (const auto& row : r.rows) {
        if (!row.chain)
            continue;
        const auto& c = *row.chain;
        std::snprintf(line, sizeof line, "%-17s %7zu %11.2f %9.2f %6.2f %12.2f %10zu", row.name.c_str(),
            c.chains, 100 * c.efficiency, 100 * c.minEfficiency, c.meanJobs, c.meanIdleNodeHours,
            c.unfinished);
        out << line << '\n';
    }
}

// With a successor --time-min, two more columns: the share of successors started with a shortened
// limit, and the mean limit granted.
void printTable(const Comparison& r, bool withGrants, std::ostream& out)
{
    char line[256];
    std::snprintf(line, sizeof line, "%-17s %5s %4s %6s %9s %9s %9s %6s %7s %9s %9s %8s %9s", "policy", "q",
        "pers", "probes", "mean(m)", "median(m)", "p90(m)", "zero%", "+-tol%", "overlap", "gap(m)", "eff+-%",
        "effOvl(m)");
    out << line << " /bound" << (withGrants ? "   short%  limit(h)\n" : "\n");
    for (const auto& row : r.rows) {
        const auto& m = row.metrics;
        std::snprintf(line, sizeof line,
            "%-17s %5s %4s %6zu %9.1f %9.1f %9.1f %6.1f %7.1f %9.1f %9.1f %8.1f %9.2f", row.name.c_str(),
            !row.rules.empty()      ? "size"
                : std::isnan(row.q) ? "-"
                                    : std::to_string(row.q).substr(0, 4).c_str(),
            row.persist ? std::to_string(row.persist).c_str() : "-", m.count, m.mean / 60, m.median / 60,
            m.p90 / 60, 100 * m.fractionZero, 100 * m.fractionWithin, m.meanOverlap / 60, m.meanGap / 60,
            100 * m.effectiveWithin, m.effectiveMeanOverlap / 60);
        out << line;
        const auto ratio = ratioToBound(r, row);
        std::snprintf(line, sizeof line, " %6s", ratio ? std::to_string(*ratio).substr(0, 5).c_str() : "-");
        out << line;
        if (withGrants) {
            std::snprintf(
                line, sizeof line, " %8.1f %9.1f", 100 * row.fractionShortened, row.meanGrantedLimit / 3600);
            out << line;
        }
        out << '\n';
    }
}

// Every simulated chain's successors, for comparing a policy's decisions with a live run's: when each
// was submitted and started, and its predecessor's limit and end (epoch seconds).
void writeHandovers(const Comparison& r, const std::filesystem::path& path)
{
    std::ofstream csv(path);
    if (!csv)
        throw std::runtime_error("cannot write " + path.string());
    csv << "policy,chain,job,submitted,started,predecessor_limit_end,predecessor_end\n";
    for (const auto& row : r.rows)
        for (std::size_t c = 0; c < row.chains.size(); ++c)
            for (std::size_t j = 0; j < row.chains[c].handovers.size(); ++j) {
                const auto& h = row.chains[c].handovers[j];
                csv << row.name << ',' << c + 1 << ',' << j + 2 << ',' << h.submitted << ',' << h.started
                    << ',' << h.predecessorLimitEnd << ',' << h.predecessorEnd << '\n';
            }
    if (!csv.flush())
        throw std::runtime_error("cannot write " + path.string());
}

void writeOutputs(const Comparison& r, const std::filesystem::path& dir, const ComparisonConfig& config)
{
    std::filesystem::create_directories(dir);
    {
        std::ofstream csv(dir / "compare.csv");
        csv << "policy,q,rules,persist_ticks,probes,unstarted,mean_s,median_s,p90_s,fraction_zero,fraction_"
               "within,"
               "mean_overlap_s,mean_gap_s,effective_fraction_within,effective_mean_overlap_s,tolerance_s,"
               "handover_s,fraction_shortened,mean_granted_limit_s,within_over_bound,chains,chains_"
               "unfinished,"
               "chain_efficiency,chain_worst_efficiency,chain_mean_jobs,chain_idle_node_hours\n";
        for (const auto& row : r.rows) {
            const auto& m = row.metrics;
            csv << row.name << ',' << (std::isnan(row.q) ? std::string() : std::to_string(row.q)) << ','
                << describeRules(row.rules) << ','
                << (row.persist ? std::to_string(row.persist) : std::string()) << ',' << m.count << ','
                << m.unstarted << ',' << m.mean << ',' << m.median << ',' << m.p90 << ',' << m.fractionZero
                << ',' << m.fractionWithin << ',' << m.meanOverlap << ',' << m.meanGap << ','
                << m.effectiveWithin << ',' << m.effectiveMeanOverlap << ',' << config.tolerance << ','
                << config.handoverSeconds << ',' << row.fractionShortened << ',' << row.meanGrantedLimit
                << ',';
            if (const auto ratio = ratioToBound(r, row))
                csv << *ratio;
            csv << ',';
            if (row.chain)
                csv << row.chain->chains << ',' << row.chain->unfinished << ',' << row.chain->efficiency
                    << ',' << row.chain->minEfficiency << ',' << row.chain->meanJobs << ','
                    << row.chain->meanIdleNodeHours;
            else
                csv << ",,,,,";
            csv << '\n';
        }
        if (!csv)
            throw std::runtime_error("cannot write " + (dir / "compare.csv").string());
    }
    {
        std::ofstream csv(dir / "interruptions.csv");
        csv << "policy,probe,interruption_s\n";
        for (const auto& row : r.rows)
            for (std::size_t i = 0; i < row.interruptions.size(); ++i)
                csv << row.name << ',' << i << ','
                    << (row.interruptions[i] ? std::to_string(*row.interruptions[i]) : std::string()) << '\n';
        if (!csv)
            throw std::runtime_error("cannot write " + (dir / "interruptions.csv").string());
    }
    if (!r.candidates.empty()) {
        std::ofstream csv(dir / "candidates.csv");
        csv << "rule,value,persist_ticks,nodes,symmetric_cost_s,handover_cost_s,fraction_within,mean_overlap_"
               "s,"
               "mean_gap_s,effective_fraction_within\n";
        for (const auto& c : r.candidates)
            csv << c.rule.kindName() << ',' << c.rule.value << ',' << c.rule.persist << ','
                << (c.nodes == 0 ? std::string("all") : std::to_string(c.nodes)) << ',' << c.symmetricCost
                << ',' << c.handoverCost << ',' << c.metrics.fractionWithin << ',' << c.metrics.meanOverlap
                << ',' << c.metrics.meanGap << ',' << c.metrics.effectiveWithin << '\n';
        if (!csv)
            throw std::runtime_error("cannot write " + (dir / "candidates.csv").string());
    }
    std::vector<CdfSeries> series;
    for (const auto& row : r.rows) {
        CdfSeries s { row.name, {} };
        for (const auto& x : row.interruptions)
            if (x)
                s.values.push_back(static_cast<double>(*x) / 3600.0);
        series.push_back(std::move(s));
    }
    std::ofstream svg(dir / "interruptions.svg");
    svg << cdfSvg(
        series, "Interruption = successor start - predecessor end", "interruption (hours)", -12, 24);
    if (!svg)
        throw std::runtime_error("cannot write " + (dir / "interruptions.svg").string());
}

// The predictor options: --model or --db-model to use one, --save-model or --db-save to keep the one used.
struct PredictorStore {
    std::string modelIn, modelOut, dbModel, dbSave;
    std::optional<db::Connection> database;
    std::shared_ptr<const WaitPredictor> pretrained;
    nlohmann::json storedMetrics; // of the --db-model row: the rules stored with it
};

void openPredictorStore(const ctl::ParsedCommand& o, bool writeFiles, PredictorStore& p)
{
    p.modelIn = o.text("model");
    p.modelOut = o.text("save-model");
    p.dbModel = o.text("db-model");
    p.dbSave = o.text("db-save");
    std::string conninfo = o.text("database");
    if (conninfo.empty())
        if (const char* env = std::getenv("BATON_DATABASE"))
            conninfo = env;
    if (!p.modelIn.empty() && !p.dbModel.empty())
        throw std::invalid_argument("give --model or --db-model, not both");
    if (writeFiles && p.modelOut.empty() && p.modelIn.empty() && p.dbModel.empty())
        p.modelOut = (std::filesystem::path(o.text("out")) / "wait-predictor.json").string();
    if (!p.dbModel.empty() || !p.dbSave.empty())
        p.database.emplace(conninfo);
    if (!p.modelIn.empty())
        p.pretrained = std::make_shared<const WaitPredictor>(WaitPredictor::load(p.modelIn));
    else if (!p.dbModel.empty()) {
        const db::Model row = latestStoredModel(*p.database, p.dbModel);
        p.pretrained = std::make_shared<const WaitPredictor>(predictorOf(row));
        p.storedMetrics = row.metrics;
    }
}

// The comparison's setting: cluster, periods, probes.
void printSetting(const LoadedJobs& loaded, const std::string& partition, const SchedulerConfig& scheduler,
    const Dropped& dropped, const ComparisonConfig& config, const Comparison& r)
{
    std::cout << "cluster " << scheduler.nodes << " " << unitName(loaded.plan.unit);
    if (loaded.partitions.size() > 1)
        std::cout << ", partition " << partitionLabel(partition);
    if (dropped.neverFit)
        std::cout << " (left out, larger than the cluster: " << dropped.neverFit << " jobs)";
    std::cout << "; warm-up until " << formatDate(config.warmupEnd) << "; train before "
              << formatDate(config.split) << "; evaluate " << formatDate(config.split) << " .. "
              << formatDate(config.evaluationEnd) << "; " << r.evaluationProbes << " probes every "
              << config.protocol.interval / 3600.0 << " h; tolerance " << config.tolerance << " s; handover "
              << config.handoverSeconds << " s";
    if (config.protocol.successorMinLimit > 0)
        std::cout << "; successors with --time-min " << config.protocol.successorMinLimit / 3600.0 << " h";
    if (scheduler.backfill != Backfill::Easy)
        std::cout << "; backfill " << backfillName(scheduler.backfill);
    std::cout << '\n';
}

// How the learned policies were trained and which rules they chose.
void printTraining(const Comparison& r, const ComparisonConfig& config)
{
    if (r.predictor) {
        const auto& m = *r.predictor;
        std::cout << "predictor: " << m.trainRows << " training rows, " << m.heldOutRows
                  << " held out; held-out MAE(log) " << m.heldOutMaeLog << ", median abs error "
                  << m.heldOutMedianAbsErrorSeconds / 60 << " min, q0.9 coverage " << m.heldOutCoverage90
                  << (r.predictorOffset == WaitOffset::RecentWait ? "; relative to the recent mean wait" : "")
                  << '\n';
    }
    if (r.gradient) {
        const auto& g = *r.gradient;
        std::printf(
            "policy-gradient: %zu training episodes recorded in %.1f s, trained in %.1f s (%zu epochs); "
            "mean reward (-|interruption|, h) greedy %.3f -> %.3f\n",
            g.episodes, r.gradientEpisodeSeconds, g.seconds, g.expectedReward.size(), g.greedyRewardBefore,
            g.greedyRewardAfter);
    }
    if (r.rulesStored)
        std::printf("predict, checkpoint-aware: the rules stored with the model\n");
    if (r.candidates.empty())
        return;
    if (config.predictMeanInterruption)
        std::printf("predict: q with the least mean |interruption| on the held-out training probes\n");
    else
        std::printf(
            "predict: %s with the most within %.0f s on the held-out training probes, mean overlap <= "
            "%.0f s\n",
            config.predictPerShape ? "per probe size, the quantile or window rule" : "q", config.tolerance,
            config.predictOverlapBudgetSeconds);
    for (const auto& row : r.rows)
        if (!row.rules.empty())
            std::printf("%s's rules: %s\n", row.name.c_str(), describeRules(row.rules).c_str());
    std::printf("checkpoint-aware: overlap budget %.3f s%s\n", r.overlapBudget,
        config.overlapBudgetFromAvg ? " (avg's mean overlap on the held-out training probes)" : "");
}

// Each policy's figures, stored with the predictor in the models table.
nlohmann::json evaluationJson(const Comparison& r)
{
    nlohmann::json evaluation = nlohmann::json::object();
    for (const auto& row : r.rows) {
        const auto& m = row.metrics;
        evaluation[row.name] = { { "q", std::isnan(row.q) ? nlohmann::json() : nlohmann::json(row.q) },
            { "persist", row.persist > 0 ? nlohmann::json(row.persist) : nlohmann::json() },
            { "rules", rulesToJson(row.rules) }, { "mean_s", m.mean }, { "median_s", m.median },
            { "p90_s", m.p90 }, { "fraction_zero", m.fractionZero }, { "fraction_within", m.fractionWithin },
            { "mean_overlap_s", m.meanOverlap }, { "effective_fraction_within", m.effectiveWithin } };
        if (const auto ratio = ratioToBound(r, row))
            evaluation[row.name]["within_over_bound"] = *ratio;
        if (row.chain)
            evaluation[row.name]["chain"] = { { "chains", row.chain->chains },
                { "efficiency", row.chain->efficiency }, { "mean_jobs", row.chain->meanJobs },
                { "idle_node_hours", row.chain->meanIdleNodeHours } };
    }
    return evaluation;
}

// Keeps the predictor used: in a file (--save-model) and as the next version in the database (--db-save).
void keepPredictor(PredictorStore& store, const WaitPredictor& used, const Comparison& r, double tolerance)
{
    if (!store.modelOut.empty()) {
        used.save(store.modelOut);
        std::cout << "saved the predictor to " << store.modelOut << '\n';
    }
    if (store.dbSave.empty())
        return;
    const auto stored = storeModel(*store.database, used, store.dbSave,
        store.modelOut.empty()
            ? std::nullopt
            : std::optional<std::string>(std::filesystem::absolute(store.modelOut).string()),
        { { "evaluation", evaluationJson(r) }, { "tolerance_s", tolerance } });
    std::cout << "stored the predictor as " << store.dbSave << " version " << stored.version << " (models.id "
              << stored.id << ")\n";
}

} // namespace

int compareCommand(const ctl::ParsedCommand& o, std::vector<std::string> policies, bool writeFiles)
{
    const auto t0 = std::chrono::steady_clock::now();
    const auto loaded = loadReported(o);
    const auto partition = choosePartition(o, loaded);
    const auto scheduler = schedulerFrom(o, loaded);
    Dropped dropped;
    const auto trace = prepared(o.text("trace"), loaded, partition, scheduler.nodes, dropped);
    auto config = comparisonFrom(o, *trace, scheduler);
    config.policies = std::move(policies);
    PredictorStore store;
    openPredictorStore(o, writeFiles, store);
    config.storedModelMetrics = store.storedMetrics;
    std::shared_ptr<const WaitPredictor> used;
    const auto r = runComparison(trace, config, store.pretrained, &used);

    printSetting(loaded, partition, scheduler, dropped, config, r);
    printTraining(r, config);
    printTable(r, config.protocol.successorMinLimit > 0, std::cout);
    if (config.chains)
        printChainTable(r, config, std::cout);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "time: samples %.1f s, training %.1f s, quantile choice %.1f s, evaluation %.1f s, chains %.1f s, "
        "total %.1f s\n",
        r.sampleSeconds, r.trainSeconds, r.calibrateSeconds, r.evaluateSeconds, r.chainSeconds, total);
    if (writeFiles) {
        const auto outDir = o.text("out");
        writeOutputs(r, outDir, config);
        std::cout << "wrote " << outDir << "/compare.csv, interruptions.csv, interruptions.svg"
                  << (r.candidates.empty() ? "" : ", candidates.csv (held-out training probes)") << '\n';
    }
    if (const auto handovers = o.text("handovers"); !handovers.empty()) {
        writeHandovers(r, handovers);
        std::cout << "wrote " << handovers << " (every simulated chain's successors)\n";
    }
    if (used)
        keepPredictor(store, *used, r, config.tolerance);
    return 0;
}

} // namespace baton::sim::cli
