// A simple provisioning rule for the simulator tests, real not mocked: submit when the running job has
// at most `lead` seconds left.
#pragma once

#include "policy/policy.hpp"

#include <cstdint>
#include <span>
#include <string>

namespace baton::sim::test {

class FixedLeadPolicy final : public Policy {
public:
    explicit FixedLeadPolicy(std::int64_t lead)
        : lead_(lead)
    { }
    std::string name() const override { return "lead-" + std::to_string(lead_); }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override
    {
        for (std::size_t i = 0; i < points.size(); ++i)
            if (points[i].remaining <= lead_)
                return i;
        return points.size();
    }
    bool needsFeatures() const override { return false; } // the rule reads only the time left

private:
    std::int64_t lead_;
};

} // namespace baton::sim::test
