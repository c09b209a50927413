// A synthetic `squeue --json` document of a busy cluster for the tick benchmarks: every job carries the
// full field set of a recorded document (tests/data/squeue_2205.json for Slurm 22.05, squeue_2411.json
// for 24.11, with its numbers as {set, infinite, number} objects and its state as a list); 30 % run,
// 50 % are pending, 20 % ended.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

namespace baton::bench {

struct SyntheticQueue {
    int jobs = 10000;
    int clusterNodes = 20000;
    std::int64_t now = 1'795'000'000;
    std::int64_t firstJobId = 1'000'000;
    std::string release = "2205"; // the recorded document whose form the jobs take: "2205" or "2411"
    // Called last for each job (its index and JSON object), e.g. to make some jobs the chains' own.
    std::function<void(int index, nlohmann::json& job)> adjust;
};

inline std::string syntheticSqueueDocument(const SyntheticQueue& q)
{
    std::ifstream in(
        std::filesystem::path(BATON_SOURCE_ROOT) / "tests" / "data" / ("squeue_" + q.release + ".json"));
    const nlohmann::json recorded = nlohmann::json::parse(in);
    const nlohmann::json templateJob = recorded["jobs"][0];
    const bool objects = q.release != "2205"; // 23.02+: numbers as objects, 24.x: the state as a list
    auto number = [&](std::int64_t value) -> nlohmann::json {
        if (!objects)
            return value;
        return { { "set", true }, { "infinite", false }, { "number", value } };
    };
    auto state = [&](const char* name) -> nlohmann::json {
        return objects ? nlohmann::json::array({ name }) : nlohmann::json(name);
    };
    std::mt19937_64 rng(42);
    auto uniform = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    nlohmann::json doc = recorded;
    doc["jobs"] = nlohmann::json::array();
    int busy = 0;
    for (int i = 0; i < q.jobs; ++i) {
        nlohmann::json j = templateJob;
        const int nodes = static_cast<int>(std::min<std::int64_t>(uniform(1, 16), uniform(1, 16)));
        const std::int64_t limitMin = uniform(1, 48) * 60;
        const std::int64_t submit = q.now - uniform(0, 3 * 86400);
        j["job_id"] = q.firstJobId + i;
        j["user_id"] = 1000 + i % 300;
        j["user_name"] = "user" + std::to_string(i % 300);
        j["name"] = "job-" + std::to_string(i);
        j["node_count"] = number(nodes);
        j["time_limit"] = number(limitMin);
        j["submit_time"] = number(submit);
        j["priority"] = number(4'294'000'000 - i);
        j["comment"] = i % 10 == 0 ? "baton:chain-" + std::to_string(i) + ":3" : "";
        const int kind = i % 10; // 3 running, 5 pending, 2 finished
        if (kind < 3 && busy + nodes <= q.clusterNodes) {
            const std::int64_t start = std::max(submit, q.now - uniform(0, limitMin * 60));
            j["job_state"] = state("RUNNING");
            j["state_reason"] = "None";
            j["start_time"] = number(start);
            j["end_time"] = number(start + limitMin * 60);
            busy += nodes;
        } else if (kind < 8) {
            j["job_state"] = state("PENDING");
            j["state_reason"] = kind == 7 ? "Resources" : "Priority";
            j["start_time"] = number(0);
            j["end_time"] = number(0);
            j["nodes"] = "";
        } else {
            const std::int64_t start = std::min(q.now, submit + uniform(0, 7200));
            j["job_state"] = state("COMPLETED");
            j["state_reason"] = "None";
            j["start_time"] = number(start);
            j["end_time"] = number(std::min(q.now, start + uniform(60, 3600)));
        }
        if (q.adjust)
            q.adjust(i, j);
        doc["jobs"].push_back(std::move(j));
    }
    return doc.dump(2); // indented, as squeue prints it
}

} // namespace baton::bench
