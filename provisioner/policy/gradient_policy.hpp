// A learned submission policy trained by policy gradient, as Mirage's reinforcement-learning baseline:
// a small network maps what a provisioner sees on a tick (the queue features and the predecessor's
// remaining time) to the probability of submitting the successor now; its reward is Mirage's
// -|interruption|. Trained with REINFORCE on the training period's probes of the same simulator.
//
// Training decisions are taken every `decisionEvery` seconds within the last `window` seconds of the
// predecessor's run (collectEpisodes records, for every such moment, what submitting then would have
// given, so that an episode's reward is a lookup and training needs no simulation). Deployed, the policy
// is greedy and asked on every tick of the window: it submits at the first whose probability reaches 1/2.
#pragma once

#include "policy.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace baton::sim {

// Training material for a learned submission policy, recorded by the simulator's protocol
// (collectEpisodes, ../sim/protocol.hpp): for every probe, the decision points every
// `decisionEvery` seconds within the last `window` seconds of the predecessor's run, and the
// interruption had the successor been submitted at each of them (one fork each), the last entry being
// a submission at the predecessor's end. With it a policy's reward for any action sequence is a lookup.
struct ProbeEpisode {
    int nodes = 0;
    std::vector<DecisionPoint> points;
    std::vector<std::optional<std::int64_t>> interruptions; // points.size() + 1 entries
};

struct GradientOptions {
    unsigned seed = 0; // weights' initialisation and the sampled episodes: same seed, same policy
    int hidden = 16; // one tanh layer
    int epochs = 40;
    int batch = 32; // episodes per update
    double learningRate = 0.003; // Adam
    std::int64_t decisionEvery = 600;
    std::int64_t window = 24 * 3600;
    double unstartedSeconds = 7 * 86400; // the reward of a successor that never started
};

struct GradientTraining {
    std::size_t episodes = 0;
    double seconds = 0;
    std::vector<double> expectedReward; // per epoch, before its updates: mean over episodes (hours)
    double greedyRewardBefore = 0, greedyRewardAfter = 0; // on the training episodes (hours)
};

class GradientPolicy final : public Policy {
public:
    static constexpr std::size_t inputCount = featureCount + 2;

    // Deterministic for a given seed and episodes.
    static GradientPolicy train(std::span<const ProbeEpisode> episodes, const GradientOptions& options,
        GradientTraining* report = nullptr);

    std::string name() const override { return "policy-gradient"; }
    std::size_t firstSubmit(std::span<const DecisionPoint> points) const override;

    // Whether `point` lies in the window where the policy decides (else it waits).
    bool decides(const DecisionPoint& point) const;
    double submitProbability(const DecisionPoint& point) const;
    // Mean reward (-|interruption| in hours) over the episodes: of the greedy policy, and expected of
    // the stochastic one being trained.
    double greedyReward(std::span<const ProbeEpisode> episodes) const;
    double expectedReward(std::span<const ProbeEpisode> episodes) const;
    const std::vector<double>& parameters() const { return params_; }
    const GradientOptions& options() const { return options_; }

private:
    using Input = std::array<double, inputCount>;
    // Training, in order: the options and episodes checked (the number of decisions), the inputs
    // standardised, the weights drawn, then per episode its expected reward and gradient added.
    static std::size_t checkedDecisions(
        std::span<const ProbeEpisode> episodes, const GradientOptions& options);
    std::vector<std::vector<Input>> standardise(
        std::span<const ProbeEpisode> episodes, std::size_t decisions);
    void initialise(std::mt19937_64& rng, double decisionsPerEpisode);
    double addGradient(const ProbeEpisode& e, std::span<const Input> xs, std::mt19937_64& rng,
        std::vector<double>& grad, std::vector<double>& hidden) const;
    static Input rawInput(const DecisionPoint& point);
    Input input(const DecisionPoint& point) const; // standardised
    double logit(const Input& x, std::vector<double>* hidden = nullptr) const;
    double reward(const std::optional<std::int64_t>& interruption) const;

    GradientOptions options_;
    Input mean_ {}, scale_ {};
    std::vector<double> params_; // w1 (hidden x inputs), b1 (hidden), w2 (hidden), b2
};

} // namespace baton::sim
