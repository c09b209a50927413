// Trained predictors through the database's `models` table (a private PostgreSQL), directly and
// through `batonctl sim`.
#include "policy/model_store.hpp"

#include "db/migrations.hpp"
#include "db/model_table.hpp"
#include "tests/support/process.hpp"
#include "tests/support/services.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <regex>

using namespace baton::sim;
using Json = nlohmann::json;

namespace {

baton::test::PostgresServer& server()
{
    static baton::test::PostgresServer instance;
    return instance;
}

std::string freshDatabase()
{
    static int counter = 0;
    return server().createDatabase("sim_models_" + std::to_string(++counter));
}

baton::db::Connection migrated(const std::string& conninfo)
{
    baton::db::Connection connection(conninfo);
    baton::db::migrate(connection);
    return connection;
}

std::vector<WaitSample> samples(unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> ahead(0, 100);
    std::vector<WaitSample> out;
    for (int i = 0; i < 600; ++i) {
        WaitSample s;
        const float nodes = static_cast<float>(1 + rng() % 4);
        const float aheadHours = ahead(rng);
        at(s.x, Feature::Nodes) = nodes;
        at(s.x, Feature::AheadNodeHours) = aheadHours;
        s.waitSeconds = 30.0 * aheadHours * nodes + static_cast<double>(rng() % 100);
        out.push_back(s);
    }
    return out;
}

WaitPredictor trained(unsigned seed)
{
    TrainOptions o;
    o.rounds = 30;
    o.maxDepth = 3;
    o.learningRate = 0.3;
    return WaitPredictor::train(samples(seed), o);
}

} // namespace

TEST(ModelStore, RoundTripThroughTheModelsTable)
{
    auto connection = migrated(freshDatabase());
    const auto first = trained(1);
    const auto second = trained(2);
    const auto a
        = storeModel(connection, first, "ls6-wait", std::string("/models/a.json"), { { "note", "first" } });
    const auto b = storeModel(connection, second, "ls6-wait", std::nullopt);
    EXPECT_EQ(a.version, 1);
    EXPECT_EQ(b.version, 2);

    baton::db::ModelTable models(connection);
    const auto row = models.get(a.id);
    ASSERT_TRUE(row);
    EXPECT_EQ(row->kind, waitPredictorKind);
    EXPECT_EQ(row->path, std::optional<std::string>("/models/a.json"));
    EXPECT_EQ(row->metrics.at("note"), "first");
    EXPECT_EQ(row->metrics.at("train_rows"), first.metrics().trainRows);

    // The latest version comes back and predicts exactly as the one stored.
    const auto loaded = loadStoredModel(connection, "ls6-wait");
    std::vector<Features> rows;
    for (const auto& s : samples(3))
        rows.push_back(s.x);
    const auto expected = second.predictLog(rows);
    const auto actual = loaded.predictLog(rows);
    ASSERT_EQ(expected.size(), actual.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_FLOAT_EQ(static_cast<float>(expected[i]), static_cast<float>(actual[i]));
        EXPECT_NEAR(second.quantileSeconds(expected[i], 0.8), loaded.quantileSeconds(actual[i], 0.8),
            1e-4 * (1 + second.quantileSeconds(expected[i], 0.8)));
    }
}

TEST(ModelStore, ClearErrorsForMissingOrForeignModels)
{
    auto connection = migrated(freshDatabase());
    EXPECT_THROW(loadStoredModel(connection, "absent"), std::runtime_error);
    baton::db::Model other;
    other.name = "'; DROP TABLE models; --";
    other.kind = "something-else";
    baton::db::ModelTable(connection).insert(other);
    try {
        loadStoredModel(connection, other.name);
        FAIL() << "a model of another kind must not load";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("not a wait predictor"), std::string::npos) << e.what();
    }
}

TEST(ModelStore, BatonctlSimStoresAndReusesAModel)
{
    const std::string conninfo = freshDatabase();
    migrated(conninfo);
    const char* exe = std::getenv("BATONCTL");
    const std::string batonctl = exe ? exe : "batonctl";
    const auto trace = (baton::test::sourceRoot() / "tests/data/sim/synthetic_jobs.csv").string();
    const std::vector<std::string> common { "--trace", trace, "--nodes", "16", "--shapes", "1,4",
        "--interval-hours", "6", "--database", conninfo };
    baton::test::TempDir dir("baton-sim-db");
    std::vector<std::string> compare { batonctl, "sim", "compare", "--out", (dir.path() / "out").string(),
        "--db-save", "synthetic" };
    compare.insert(compare.end(), common.begin(), common.end());
    const auto stored = baton::test::run(compare);
    ASSERT_EQ(stored.exitCode, 0) << stored.output;
    EXPECT_NE(stored.output.find("stored the predictor as synthetic version 1"), std::string::npos)
        << stored.output;

    std::vector<std::string> reuse { batonctl, "sim", "run", "--policy", "checkpoint-aware", "--db-model",
        "synthetic" };
    reuse.insert(reuse.end(), common.begin(), common.end());
    const auto ran = baton::test::run(reuse);
    ASSERT_EQ(ran.exitCode, 0) << ran.output;
    EXPECT_NE(ran.output.find("checkpoint-aware"), std::string::npos) << ran.output;

    auto connection = baton::db::Connection(conninfo);
    const auto row = baton::db::ModelTable(connection).latest("synthetic");
    ASSERT_TRUE(row);
    EXPECT_TRUE(row->metrics.at("evaluation").contains("predict"));
    // The stored evaluation carries each policy's chain efficiency too.
    const double efficiency = row->metrics.at("evaluation").at("predict").at("chain").at("efficiency");
    EXPECT_GT(efficiency, 0);
    EXPECT_LE(efficiency, 1);

    // The reusing run decided by the rule stored with the model, as batond does, not by one chosen anew.
    EXPECT_NE(ran.output.find("predict, checkpoint-aware: the rules stored with the model"), std::string::npos)
        << ran.output;
    EXPECT_EQ(ran.output.find("overlap budget"), std::string::npos) << ran.output;
    const auto& rule = row->metrics.at("evaluation").at("checkpoint-aware");
    EXPECT_EQ(rule.at("persist"), 1);
    char q[32];
    std::snprintf(q, sizeof q, "%.2f", rule.at("q").get<double>());
    const std::regex caRow("\\ncheckpoint-aware +([0-9.]+) ");
    std::smatch shown;
    ASSERT_TRUE(std::regex_search(ran.output, shown, caRow)) << ran.output;
    EXPECT_EQ(shown[1].str(), q) << ran.output;
}

TEST(ModelStore, StoredRulesAreReadAsBatondDecidesByThem)
{
    const Json metrics { { "tolerance_s", 300 },
        { "evaluation",
            { { "predict",
                  { { "q", nullptr },
                      { "rules", Json::array({ { { "nodes", 1 }, { "rule", "window" }, { "value", 0.65 } } }) } } },
                { "checkpoint-aware", { { "q", 0.35 }, { "persist", 10 }, { "rules", Json::array() } } },
                { "avg", { { "q", nullptr } } },
                { "damaged", { { "q", 0.4 }, { "rules", Json::array({ { { "nodes", 1 }, { "rule", "guess" } } }) } } },
                { "odd-persist", { { "q", 0.5 }, { "persist", -3 } } } } } };
    const auto predict = storedRuleFor(metrics, "predict");
    ASSERT_TRUE(predict);
    EXPECT_EQ(describeRules(predict->perSize), "1 node: window tau=0.65");
    const auto checkpoint = storedRuleFor(metrics, "checkpoint-aware");
    ASSERT_TRUE(checkpoint);
    EXPECT_TRUE(checkpoint->perSize.empty());
    EXPECT_DOUBLE_EQ(checkpoint->q.value_or(0), 0.35);
    EXPECT_EQ(checkpoint->persist, 10);
    EXPECT_FALSE(storedRuleFor(metrics, "avg")) << "no rule stored";
    EXPECT_FALSE(storedRuleFor(metrics, "absent"));
    EXPECT_FALSE(storedRuleFor(Json::object(), "predict"));
    EXPECT_FALSE(storedRuleFor(Json { { "evaluation", "text" } }, "predict"));
    const auto damaged = storedRuleFor(metrics, "damaged");
    ASSERT_TRUE(damaged);
    EXPECT_TRUE(damaged->perSize.empty());
    EXPECT_FALSE(damaged->unreadable.empty());
    EXPECT_DOUBLE_EQ(damaged->q.value_or(0), 0.4) << "its quantile instead";
    EXPECT_EQ(storedRuleFor(metrics, "odd-persist")->persist, 1);
    EXPECT_DOUBLE_EQ(storedTolerance(metrics), 300);
    EXPECT_DOUBLE_EQ(storedTolerance(Json::object()), 600);
}
