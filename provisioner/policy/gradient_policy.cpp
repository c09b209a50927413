#include "gradient_policy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

namespace baton::sim {

namespace {

constexpr std::size_t fcfsStartFeature = 11; // hours_until_start_fcfs, see features.cpp

// A uniform double in [0, 1) from the generator's raw bits: std::uniform_real_distribution is
// implementation-defined, and the policy must be the same for a seed wherever it is trained.
double uniform(std::mt19937_64& rng)
{
    return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

double sigmoid(double z)
{
    return 1.0 / (1.0 + std::exp(-z));
}

} // namespace

GradientPolicy::Input GradientPolicy::rawInput(const DecisionPoint& point)
{
    // Counts, node-hours and hours span orders of magnitude: their logs make the network's job a
    // comparison of scales (e.g. the start estimate against the time left).
    Input x {};
    for (std::size_t i = 0; i < featureCount; ++i)
        x[i] = std::log1p(std::max(0.0, static_cast<double>(point.features[i])));
    const double remaining = std::log1p(static_cast<double>(point.remaining) / 3600.0);
    x[featureCount] = remaining;
    x[featureCount + 1] = x[fcfsStartFeature] - remaining;
    return x;
}

GradientPolicy::Input GradientPolicy::input(const DecisionPoint& point) const
{
    Input x = rawInput(point);
    for (std::size_t i = 0; i < inputCount; ++i)
        x[i] = (x[i] - mean_[i]) * scale_[i];
    return x;
}

double GradientPolicy::logit(const Input& x, std::vector<double>* hidden) const
{
    const auto h = static_cast<std::size_t>(options_.hidden);
    const double* w1 = params_.data();
    const double* b1 = w1 + h * inputCount;
    const double* w2 = b1 + h;
    double z = w2[h];
    for (std::size_t j = 0; j < h; ++j) {
        double a = b1[j];
        for (std::size_t i = 0; i < inputCount; ++i)
            a += w1[j * inputCount + i] * x[i];
        a = std::tanh(a);
        if (hidden)
            (*hidden)[j] = a;
        z += w2[j] * a;
    }
    return z;
}

double GradientPolicy::reward(const std::optional<std::int64_t>& interruption) const
{
    return -(interruption ? std::abs(static_cast<double>(*interruption)) : options_.unstartedSeconds)
        / 3600.0;
}

bool GradientPolicy::decides(const DecisionPoint& point) const
{
    // Every tick of the window, not only the training's 10-min grid: a live provisioner's ticks do not
    // fall on the grid. Greedy, this submits at most one grid step before the grid would.
    return point.remaining > 0 && point.remaining <= options_.window;
}

double GradientPolicy::submitProbability(const DecisionPoint& point) const
{
    return sigmoid(logit(input(point)));
}

std::size_t GradientPolicy::firstSubmit(std::span<const DecisionPoint> points) const
{
    for (std::size_t i = 0; i < points.size(); ++i)
        if (decides(points[i]) && submitProbability(points[i]) >= 0.5)
            return i;
    return points.size();
}

double GradientPolicy::greedyReward(std::span<const ProbeEpisode> episodes) const
{
    if (episodes.empty())
        return 0;
    double sum = 0;
    for (const auto& e : episodes) {
        std::size_t a = e.points.size();
        for (std::size_t j = 0; j < e.points.size(); ++j)
            if (submitProbability(e.points[j]) >= 0.5) {
                a = j;
                break;
            }
        sum += reward(e.interruptions[a]);
    }
    return sum / static_cast<double>(episodes.size());
}

double GradientPolicy::expectedReward(std::span<const ProbeEpisode> episodes) const
{
    if (episodes.empty())
        return 0;
    double sum = 0;
    for (const auto& e : episodes) {
        double notYet = 1, expected = 0;
        for (std::size_t j = 0; j < e.points.size(); ++j) {
            const double p = submitProbability(e.points[j]);
            expected += notYet * p * reward(e.interruptions[j]);
            notYet *= 1 - p;
        }
        sum += expected + notYet * reward(e.interruptions.back());
    }
    return sum / static_cast<double>(episodes.size());
}

std::size_t GradientPolicy::checkedDecisions(
    std::span<const ProbeEpisode> episodes, const GradientOptions& options)
{
    if (options.hidden <= 0 || options.epochs < 0 || options.batch <= 0 || !(options.learningRate > 0)
        || options.decisionEvery <= 0 || options.window < options.decisionEvery)
        throw std::invalid_argument("policy gradient: bad training options");
    std::size_t decisions = 0;
    for (const auto& e : episodes) {
        if (e.interruptions.size() != e.points.size() + 1)
            throw std::invalid_argument(
                "policy gradient: an episode needs one outcome per decision and one more");
        decisions += e.points.size();
    }
    if (decisions == 0)
        throw std::invalid_argument("policy gradient: no decision points to train on");
    return decisions;
}

std::vector<std::vector<GradientPolicy::Input>> GradientPolicy::standardise(
    std::span<const ProbeEpisode> episodes, std::size_t decisions)
{
    std::vector<std::vector<Input>> raw(episodes.size());
    Input sum {}, sumSq {};
    for (std::size_t k = 0; k < episodes.size(); ++k)
        for (const auto& p : episodes[k].points) {
            raw[k].push_back(rawInput(p));
            for (std::size_t i = 0; i < inputCount; ++i) {
                sum[i] += raw[k].back()[i];
                sumSq[i] += raw[k].back()[i] * raw[k].back()[i];
            }
        }
    const auto n = static_cast<double>(decisions);
    for (std::size_t i = 0; i < inputCount; ++i) {
        mean_[i] = sum[i] / n;
        const double var = std::max(0.0, sumSq[i] / n - mean_[i] * mean_[i]);
        scale_[i] = var > 1e-12 ? 1.0 / std::sqrt(var) : 0.0; // a constant input carries nothing
    }
    std::vector<std::vector<Input>> x(episodes.size());
    for (std::size_t k = 0; k < episodes.size(); ++k)
        for (const auto& r : raw[k]) {
            Input v;
            for (std::size_t i = 0; i < inputCount; ++i)
                v[i] = (r[i] - mean_[i]) * scale_[i];
            x[k].push_back(v);
        }
    return x;
}

void GradientPolicy::initialise(std::mt19937_64& rng, double decisionsPerEpisode)
{
    const auto h = static_cast<std::size_t>(options_.hidden);
    const std::size_t count = h * inputCount + h + h + 1;
    params_.resize(count);
    const double a1 = 1.0 / std::sqrt(static_cast<double>(inputCount)),
                 a2 = 1.0 / std::sqrt(static_cast<double>(h));
    for (std::size_t i = 0; i < h * inputCount; ++i)
        params_[i] = a1 * (2 * uniform(rng) - 1);
    for (std::size_t i = h * inputCount + h; i < count - 1; ++i)
        params_[i] = a2 * (2 * uniform(rng) - 1);
    // Start by submitting at a uniform hazard that leaves about one episode in three to the
    // predecessor's end: every decision is tried early in training.
    params_[count - 1] = std::log(1.0 / std::max(decisionsPerEpisode, 2.0));
}

double GradientPolicy::addGradient(const ProbeEpisode& e, std::span<const Input> xs, std::mt19937_64& rng,
    std::vector<double>& grad, std::vector<double>& hidden) const
{
    const auto h = static_cast<std::size_t>(options_.hidden);
    const std::size_t decisionsHere = xs.size();
    std::vector<double> p(decisionsHere);
    // The exact expected reward under the current policy: the baseline that centres the sampled return
    // (it does not depend on the sampled action, so the estimate stays unbiased).
    double notYet = 1, expected = 0;
    for (std::size_t j = 0; j < decisionsHere; ++j) {
        p[j] = sigmoid(logit(xs[j]));
        expected += notYet * p[j] * reward(e.interruptions[j]);
        notYet *= 1 - p[j];
    }
    expected += notYet * reward(e.interruptions.back());
    std::size_t action = decisionsHere;
    for (std::size_t j = 0; j < decisionsHere; ++j)
        if (uniform(rng) < p[j]) {
            action = j;
            break;
        }
    const double advantage = reward(e.interruptions[action]) - expected;
    // d log P(trajectory) / d logit_j: -p_j for each decision to wait, 1 - p_j for the submit.
    const std::size_t last = std::min(action + 1, decisionsHere);
    for (std::size_t j = 0; j < last; ++j) {
        const double dz = advantage * (j == action ? 1 - p[j] : -p[j]);
        logit(xs[j], &hidden);
        double* gw1 = grad.data();
        double* gb1 = gw1 + h * inputCount;
        double* gw2 = gb1 + h;
        const double* w2 = params_.data() + h * inputCount + h;
        gw2[h] += dz;
        for (std::size_t u = 0; u < h; ++u) {
            gw2[u] += dz * hidden[u];
            const double da = dz * w2[u] * (1 - hidden[u] * hidden[u]);
            gb1[u] += da;
            for (std::size_t i = 0; i < inputCount; ++i)
                gw1[u * inputCount + i] += da * xs[j][i];
        }
    }
    return expected;
}

GradientPolicy GradientPolicy::train(
    std::span<const ProbeEpisode> episodes, const GradientOptions& options, GradientTraining* report)
{
    const std::size_t decisions = checkedDecisions(episodes, options);
    const auto t0 = std::chrono::steady_clock::now();
    GradientPolicy policy;
    policy.options_ = options;
    // Standardise the inputs over every decision point of the training episodes.
    const auto x = policy.standardise(episodes, decisions);
    std::mt19937_64 rng(options.seed);
    policy.initialise(rng, static_cast<double>(decisions) / static_cast<double>(episodes.size()));
    const std::size_t count = policy.params_.size();

    GradientTraining r;
    r.episodes = episodes.size();
    r.greedyRewardBefore = policy.greedyReward(episodes);

    // Adam, ascending the expected reward.
    std::vector<double> m(count, 0), v(count, 0), grad(count, 0),
        hidden(static_cast<std::size_t>(options.hidden));
    constexpr double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    long step = 0;
    std::vector<std::size_t> order(episodes.size());
    for (std::size_t k = 0; k < order.size(); ++k)
        order[k] = k;
    for (int epoch = 0; epoch < options.epochs; ++epoch) {
        for (std::size_t k = order.size(); k > 1; --k) // Fisher-Yates with the seeded generator
            std::swap(order[k - 1], order[static_cast<std::size_t>(uniform(rng) * static_cast<double>(k))]);
        double epochExpected = 0;
        for (std::size_t b = 0; b < order.size(); b += static_cast<std::size_t>(options.batch)) {
            std::fill(grad.begin(), grad.end(), 0.0);
            const std::size_t end = std::min(order.size(), b + static_cast<std::size_t>(options.batch));
            for (std::size_t idx = b; idx < end; ++idx)
                epochExpected += policy.addGradient(episodes[order[idx]], x[order[idx]], rng, grad, hidden);
            ++step;
            const double scale = 1.0 / static_cast<double>(end - b);
            const double c1 = 1 - std::pow(beta1, static_cast<double>(step));
            const double c2 = 1 - std::pow(beta2, static_cast<double>(step));
            for (std::size_t i = 0; i < count; ++i) {
                const double g = grad[i] * scale;
                m[i] = beta1 * m[i] + (1 - beta1) * g;
                v[i] = beta2 * v[i] + (1 - beta2) * g * g;
                policy.params_[i] += options.learningRate * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
            }
        }
        r.expectedReward.push_back(epochExpected / static_cast<double>(episodes.size()));
    }
    r.greedyRewardAfter = policy.greedyReward(episodes);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (report)
        *report = std::move(r);
    return policy;
}

} // namespace baton::sim
