#include "decision_points.hpp"

#include <algorithm>

namespace baton::service {

std::vector<sim::DecisionPoint> timeOnlyDecisionPoints(
    const ClusterQueue&, std::span<const ClusterJob> current, std::int64_t now)
{
    std::vector<sim::DecisionPoint> points(current.size());
    for (std::size_t i = 0; i < current.size(); ++i) {
        points[i].now = now;
        points[i].remaining
            = std::max<std::int64_t>(0, current[i].startTime + current[i].timeLimitSeconds - now);
        points[i].limit = current[i].timeLimitSeconds;
    }
    return points;
}

} // namespace baton::service
