// batond's pieces that need no services: configuration, the state name table, bounded JSON bodies.
#include "chain_state.hpp"
#include "config.hpp"
#include "http_api.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <unistd.h>

namespace {

using namespace baton::service;

TEST(ChainStateNames, RoundTripEveryState)
{
    for (const auto& [state, name] : chainStateNames) {
        EXPECT_EQ(nameOf(state), name);
        EXPECT_EQ(chainStateFromName(name), state);
    }
    EXPECT_FALSE(chainStateFromName("active"));
    EXPECT_TRUE(isTerminal(ChainState::Finished));
    EXPECT_FALSE(isTerminal(ChainState::Paused));
}

// The whole state machine as a table: every state against every event, the state it leads to or "-" where
// the event is refused. The API and the tick both consult chainTransitions, so this is what both do.
TEST(ChainStateMachine, EveryStateAgainstEveryEvent)
{
    using S = ChainState;
    using E = ChainEvent;
    const std::optional<S> no;
    struct Row {
        E event;
        std::array<std::optional<S>, 8> to; // running, successor_pending, handover, paused, quarantined,
                                            // finished, failed, cancelled
    };
    const Row table[] = {
        { E::SubmitSuccessor, { S::SuccessorPending, no, no, no, no, no, no, no } },
        { E::SuccessorFound, { S::SuccessorPending, no, no, no, no, no, no, no } },
        { E::SuccessorWithdrawn, { no, S::Running, no, no, no, no, no, no } },
        { E::SuccessorStarted, { no, S::Handover, no, no, no, no, no, no } },
        { E::PredecessorEnded, { no, S::Running, S::Running, no, no, no, no, no } },
        { E::TrainingDone, { S::Finished, S::Finished, S::Finished, no, no, no, no, no } },
        { E::RetryBudgetSpent, { S::Failed, S::Failed, S::Failed, no, no, no, no, no } },
        { E::JobCancelledOutside, { S::Paused, S::Paused, S::Paused, no, no, no, no, no } },
        { E::JobAdopted, { S::Running, no, no, S::Running, S::Running, no, no, no } },
        { E::Quarantine, { S::Quarantined, S::Quarantined, S::Quarantined, S::Quarantined, no, no, no, no } },
        { E::Pause, { S::Paused, S::Paused, S::Paused, no, no, no, no, no } },
        { E::Resume, { no, no, no, S::Running, S::Running, no, no, no } },
        { E::Cancel, { S::Cancelled, S::Cancelled, S::Cancelled, S::Cancelled, S::Cancelled, no, no, no } },
        { E::Resubmit, { S::Running, no, no, S::Running, S::Running, S::Running, S::Running, S::Running } },
        { E::Preempt, { S::Running, S::SuccessorPending, no, no, no, no, no, no } },
    };
    ASSERT_EQ(std::size(table), chainEventNames.size()) << "every event has a row";
    for (const Row& row : table)
        for (std::size_t i = 0; i < chainStateNames.size(); ++i) {
            const S state = chainStateNames[i].first;
            EXPECT_EQ(nextState(state, row.event), row.to[i]) << nameOf(row.event) << " from " << nameOf(state);
            EXPECT_EQ(isAllowed(state, row.event), row.to[i].has_value());
        }
    // Nothing leaves an ended state but a resubmit.
    for (const auto& [event, name] : chainEventNames)
        for (const S ended : { S::Finished, S::Failed, S::Cancelled })
            EXPECT_EQ(isAllowed(ended, event), event == E::Resubmit) << name;
}

TEST(ServiceConfig, SubmitGraceMustExceedTheSlurmTimeout)
{
    ServiceConfig config;
    const std::vector<std::string> args { "--slurm-timeout-seconds", "60", "--submit-grace-seconds", "60" };
    EXPECT_THROW(applyFlags(config, args), ConfigError);
    const std::vector<std::string> fine { "--slurm-timeout-seconds", "60", "--submit-grace-seconds", "90" };
    EXPECT_TRUE(applyFlags(config, fine));
}

TEST(ServiceConfig, FileThenFlagsWithEveryKeyValidated)
{
    const std::string path = "/tmp/batond-config-" + std::to_string(getpid()) + ".json";
    std::ofstream(path)
        << R"({"listen_port": 9000, "policy": "avg", "tick_seconds": 2.5, "slurm_users": ["root"]})";
    ServiceConfig config;
    const std::vector<std::string> args { "--config", path, "--listen-port=9100", "--retry-budget", "5",
        "--retention-days", "0" };
    ASSERT_TRUE(applyFlags(config, args));
    EXPECT_EQ(config.listenPort, 9100);
    EXPECT_EQ(config.policy, "avg");
    EXPECT_EQ(config.tick.count(), 2500);
    EXPECT_EQ(config.retryBudget, 5);
    EXPECT_EQ(config.retentionDays, 0);

    std::ofstream(path) << R"({"listen_prot": 9000})";
    try {
        loadConfigFile(path);
        FAIL() << "an unknown key was accepted";
    } catch (const ConfigError& error) {
        EXPECT_NE(std::string(error.what()).find("unknown key 'listen_prot'"), std::string::npos)
            << error.what();
    }
    for (const char* bad : { R"({"listen_port": 70000})", R"({"policy": "fastest"})",
             R"({"tick_seconds": "1"})", R"({"retention_days": -1})", R"([1, 2])", "{not json" }) {
        std::ofstream(path) << bad;
        EXPECT_THROW(loadConfigFile(path), ConfigError) << bad;
    }
    EXPECT_THROW(applyFlags(config, std::vector<std::string> { "--listen-port" }), ConfigError);
    EXPECT_THROW(applyFlags(config, std::vector<std::string> { "stray" }), ConfigError);
    EXPECT_FALSE(applyFlags(config, std::vector<std::string> { "--help" }));
    std::remove(path.c_str());
}

TEST(BoundedJson, RefusesNulInvalidUtf8AndDepth)
{
    EXPECT_EQ(parseBoundedJson(R"({"a": [1, {"b": "ü"}]})", 4)["a"][1]["b"], "ü");
    EXPECT_THROW(parseBoundedJson(std::string("{\"a\": \"x\0\"}", 11), 8), std::invalid_argument);
    EXPECT_THROW(parseBoundedJson(R"({"a": "x\u0000"})", 8), std::invalid_argument);
    EXPECT_THROW(parseBoundedJson("{\"a\": \"\xc0\xaf\"}", 8), std::invalid_argument); // overlong '/'
    EXPECT_THROW(parseBoundedJson("{\"a\": \"\xed\xa0\x80\"}", 8), std::invalid_argument); // surrogate
    EXPECT_THROW(parseBoundedJson("{\"a\": 1", 8), std::invalid_argument);
    // A million levels: refused at the bound without building (or recursing into) the value.
    const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
    EXPECT_THROW(parseBoundedJson(deep, 16), std::invalid_argument);
    EXPECT_NO_THROW(parseBoundedJson(std::string(16, '[') + std::string(16, ']'), 16));
    EXPECT_THROW(parseBoundedJson(std::string(17, '[') + std::string(17, ']'), 16), std::invalid_argument);
}

} // namespace
