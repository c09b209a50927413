// The read model of the HTTP API: the JSON documents that show chains to their owners and operators,
// built from the table stores' rows (and, for the detail's histories, from reads of its own). The
// table stores return rows; only this file knows the documents' shape.
#pragma once

#include "chain_store.hpp"
#include "job_store.hpp"

#include "db/connection.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace baton::service {

// A chain's own row as the API shows it, with the policy that decides for it: its own, or `servicePolicy`.
nlohmann::json chainView(const ChainRow& chain, const std::string& servicePolicy);

class ChainViews {
public:
    ChainViews(db::Connection& connection, std::string servicePolicy)
        : connection_(connection)
        , servicePolicy_(std::move(servicePolicy))
    { }

    // An entry of GET /v1/chains: the chain, its current and pending job and its newest checkpoint.
    nlohmann::json summary(const ChainRow& chain);
    // The detail document of GET /v1/chains/{owner}/{name}: jobs with their interruptions, the newest
    // checkpoints, decisions and handovers, and how the next job is submitted.
    nlohmann::json detail(const ChainRow& chain);

private:
    static nlohmann::json jobs(const std::vector<JobRow>& rows);
    nlohmann::json checkpoints(const ChainRow& chain);
    nlohmann::json decisions(const ChainRow& chain);
    nlohmann::json handovers(const ChainRow& chain);

    db::Connection& connection_;
    std::string servicePolicy_;
};

} // namespace baton::service
