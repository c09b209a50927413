#include "policy.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace baton::sim {

std::size_t ReactivePolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    return points.size();
}

std::size_t AveragePolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    for (std::size_t i = 0; i < points.size(); ++i)
        if (points[i].recentMeanWait >= static_cast<double>(points[i].remaining))
            return i;
    return points.size();
}

QuantilePolicy::QuantilePolicy(std::string name, std::shared_ptr<const WaitPredictor> predictor, double q,
    double marginSeconds, int persist)
    : name_(std::move(name))
    , predictor_(std::move(predictor))
    , q_(q)
    , margin_(marginSeconds)
    , persist_(persist)
{
    if (persist < 1)
        throw std::invalid_argument("a crossing must persist for at least one tick");
    if (!predictor_)
        throw std::invalid_argument("a quantile policy needs a predictor");
    if (!(q > 0 && q < 1))
        throw std::invalid_argument("the quantile must lie strictly between 0 and 1");
}

std::size_t QuantilePolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    std::vector<double> meanLog;
    meanLog.reserve(points.size());
    for (const auto& p : points)
        meanLog.push_back(p.meanLogWait);
    if (!points.empty() && std::isnan(points.front().meanLogWait)) {
        std::vector<Features> rows;
        rows.reserve(points.size());
        for (const auto& p : points)
            rows.push_back(p.features);
        meanLog = predictor_->predictLog(rows);
    }
    int run = 0;
    for (std::size_t i = 0; i < points.size(); ++i) {
        const bool crossed = predictor_->quantileSeconds(meanLog[i], q_)
            >= static_cast<double>(points[i].remaining) - margin_;
        run = crossed ? run + 1 : 0;
        if (run >= persist_)
            return i;
    }
    return points.size();
}

} // namespace baton::sim
