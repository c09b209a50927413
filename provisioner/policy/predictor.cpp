#include "predictor.hpp"

#include "statistics.hpp"

#include <xgboost/c_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <stdexcept>

namespace baton::sim {

namespace {

constexpr int residualSteps = 99;

void check(int rc, const char* what)
{
    if (rc != 0)
        throw std::runtime_error(std::string("xgboost ") + what + ": " + XGBGetLastError());
}

using Matrix = std::unique_ptr<void, int (*)(DMatrixHandle)>;

// Each row's base margin: log1p of its recent mean wait in seconds, or none.
std::vector<float> offsetsOf(std::span<const Features> rows, WaitOffset offset)
{
    std::vector<float> margins;
    if (offset == WaitOffset::None)
        return margins;
    for (const Features& row : rows)
        margins.push_back(static_cast<float>(
            std::log1p(std::max(0.0, static_cast<double>(at(row, Feature::RecentMeanWaitHours)) * 3600.0))));
    return margins;
}

Matrix makeMatrix(std::span<const Features> rows, WaitOffset offset)
{
    DMatrixHandle h = nullptr;
    check(XGDMatrixCreateFromMat(
              rows.empty() ? nullptr : rows.front().data(), rows.size(), featureCount, std::nanf(""), &h),
        "creating a matrix");
    Matrix matrix(h, XGDMatrixFree);
    if (const auto margins = offsetsOf(rows, offset); !margins.empty())
        check(XGDMatrixSetFloatInfo(h, "base_margin", margins.data(), margins.size()), "setting offsets");
    return matrix;
}

constexpr std::pair<WaitOffset, const char*> offsetNames[] {
    { WaitOffset::None, "none" },
    { WaitOffset::RecentWait, "recent_mean_wait" },
};

std::shared_ptr<void> makeBooster(DMatrixHandle train)
{
    BoosterHandle h = nullptr;
    DMatrixHandle cache[] = { train };
    check(XGBoosterCreate(train ? cache : nullptr, train ? 1 : 0, &h), "creating a booster");
    return std::shared_ptr<void>(h, XGBoosterFree);
}

std::vector<double> predictWith(void* booster, std::span<const Features> rows, WaitOffset offset)
{
    if (rows.empty())
        return {};
    auto m = makeMatrix(rows, offset);
    bst_ulong n = 0;
    const float* out = nullptr;
    // XGBoosterPredict returns a buffer the booster owns and the C API does not promise that concurrent
    // calls are safe; the simulator's chains call it from two threads, so calls take turns.
    static std::mutex predicting;
    const std::lock_guard lock(predicting);
    check(XGBoosterPredict(booster, m.get(), 0, 0, 0, &n, &out), "predicting");
    return std::vector<double>(out, out + n);
}

} // namespace

WaitPredictor WaitPredictor::train(std::span<const WaitSample> samples, const TrainOptions& options)
{
    const auto heldOut
        = static_cast<std::size_t>(static_cast<double>(samples.size()) * options.heldOutFraction);
    if (samples.size() < 20 || heldOut < 10)
        throw std::invalid_argument("too few samples to train and calibrate a wait predictor");
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t nTrain = samples.size() - heldOut;
    std::vector<Features> x;
    std::vector<float> y;
    for (const auto& s : samples) {
        x.push_back(s.x);
        y.push_back(static_cast<float>(std::log1p(std::max(s.waitSeconds, 0.0))));
    }
    const std::span<const Features> trainRows(x.data(), nTrain);
    auto dtrain = makeMatrix(trainRows, options.offset);
    check(XGDMatrixSetFloatInfo(dtrain.get(), "label", y.data(), nTrain), "setting labels");

    WaitPredictor p;
    p.offset_ = options.offset;
    p.booster_ = makeBooster(dtrain.get());
    const std::pair<const char*, std::string> params[] = {
        { "objective", "reg:squarederror" },
        { "max_depth", std::to_string(options.maxDepth) },
        { "eta", std::to_string(options.learningRate) },
        { "subsample", "0.8" },
        { "min_child_weight", "5" },
        { "nthread", std::to_string(options.threads) },
        { "seed", std::to_string(options.seed) },
        { "verbosity", "0" },
    };
    for (const auto& [k, v] : params)
        check(XGBoosterSetParam(p.booster_.get(), k, v.c_str()), "setting a parameter");
    for (int i = 0; i < options.rounds; ++i)
        check(XGBoosterUpdateOneIter(p.booster_.get(), i, dtrain.get()), "training");

    // Calibrate the residual distribution on the held-out (later) rows.
    const std::span<const Features> heldRows(x.data() + nTrain, heldOut);
    const auto mu = predictWith(p.booster_.get(), heldRows, p.offset_);
    std::vector<double> residuals, absLog;
    for (std::size_t i = 0; i < heldOut; ++i) {
        const double r = y[nTrain + i] - mu[i];
        residuals.push_back(r);
        absLog.push_back(std::abs(r));
    }
    for (int k = 1; k <= residualSteps; ++k)
        p.residualQuantiles_.push_back(quantile(residuals, k / 100.0));

    std::vector<double> absSeconds;
    std::size_t covered = 0;
    for (std::size_t i = 0; i < heldOut; ++i) {
        const double wait = samples[nTrain + i].waitSeconds;
        absSeconds.push_back(std::abs(p.quantileSeconds(mu[i], 0.5) - wait));
        covered += wait <= p.quantileSeconds(mu[i], 0.9) ? 1 : 0;
    }
    auto& m = p.metrics_;
    m.trainRows = nTrain;
    m.heldOutRows = heldOut;
    m.heldOutMaeLog = std::accumulate(absLog.begin(), absLog.end(), 0.0) / static_cast<double>(heldOut);
    m.heldOutMedianAbsErrorSeconds = quantile(absSeconds, 0.5);
    m.heldOutCoverage90 = static_cast<double>(covered) / static_cast<double>(heldOut);
    m.trainSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return p;
}

std::vector<double> WaitPredictor::predictLog(std::span<const Features> rows) const
{
    return predictWith(booster_.get(), rows, offset_);
}

double WaitPredictor::quantileSeconds(double meanLog, double q) const
{
    const double pos = std::clamp(q * 100.0 - 1.0, 0.0, static_cast<double>(residualSteps - 1));
    const auto lo = static_cast<std::size_t>(pos);
    const auto hi = std::min<std::size_t>(lo + 1, residualSteps - 1);
    const double r = residualQuantiles_[lo] + (residualQuantiles_[hi] - residualQuantiles_[lo]) * (pos - lo);
    return std::max(std::expm1(meanLog + r), 0.0);
}

double WaitPredictor::probabilityAtMost(double meanLog, double seconds) const
{
    const double r = std::log1p(std::max(seconds, 0.0)) - meanLog;
    const auto& table = residualQuantiles_;
    if (r <= table.front())
        return 0.01;
    if (r >= table.back())
        return 0.99;
    // The first step above r; equal residuals (a flat stretch of the table) resolve to its upper end.
    const auto hi = static_cast<std::size_t>(std::upper_bound(table.begin(), table.end(), r) - table.begin());
    const std::size_t lo = hi - 1;
    const double step = table[hi] - table[lo];
    const double within = step > 0 ? (r - table[lo]) / step : 1.0;
    return (static_cast<double>(lo) + 1.0 + within) / 100.0;
}

nlohmann::json WaitPredictor::toJson() const
{
    bst_ulong len = 0;
    const char* buf = nullptr;
    check(XGBoosterSaveModelToBuffer(booster_.get(), R"({"format": "json"})", &len, &buf), "saving");
    nlohmann::json doc;
    doc["format"] = "baton-wait-predictor";
    // Version 2 marks a relative model, so that a reader that knows only version 1 refuses it.
    doc["version"] = offset_ == WaitOffset::None ? 1 : 2;
    doc["target"] = "log1p(wait_seconds)";
    for (const auto& [value, name] : offsetNames)
        if (value == offset_)
            doc["offset"] = name;
    doc["features"] = featureNames;
    doc["residual_quantiles"] = residualQuantiles_;
    doc["metrics"] = {
        { "train_rows", metrics_.trainRows },
        { "held_out_rows", metrics_.heldOutRows },
        { "held_out_mae_log", metrics_.heldOutMaeLog },
        { "held_out_median_abs_error_seconds", metrics_.heldOutMedianAbsErrorSeconds },
        { "held_out_coverage_q90", metrics_.heldOutCoverage90 },
        { "train_seconds", metrics_.trainSeconds },
    };
    doc["booster"] = nlohmann::json::parse(std::string_view(buf, len));
    return doc;
}

WaitPredictor WaitPredictor::fromJson(const nlohmann::json& doc)
{
    if (!doc.is_object() || doc.value("format", "") != "baton-wait-predictor")
        throw std::runtime_error("not a baton wait-predictor model");
    const int version = doc.value("version", 0);
    if (version != 1 && version != 2)
        throw std::runtime_error("unsupported wait-predictor model version");
    WaitPredictor p;
    const std::string offset = doc.value("offset", std::string("none"));
    const auto known = std::find_if(std::begin(offsetNames), std::end(offsetNames),
        [&](const auto& entry) { return offset == entry.second; });
    if (known == std::end(offsetNames) || (version == 2) != (known->first != WaitOffset::None))
        throw std::runtime_error("unsupported wait-predictor offset '" + offset + "'");
    p.offset_ = known->first;
    if (doc.at("features").get<std::vector<std::string>>()
        != std::vector<std::string>(featureNames.begin(), featureNames.end()))
        throw std::runtime_error("the model was trained on different features");
    p.residualQuantiles_ = doc.at("residual_quantiles").get<std::vector<double>>();
    if (p.residualQuantiles_.size() != residualSteps)
        throw std::runtime_error("the model's residual quantiles are incomplete");
    const auto& m = doc.at("metrics");
    p.metrics_.trainRows = m.at("train_rows").get<std::size_t>();
    p.metrics_.heldOutRows = m.at("held_out_rows").get<std::size_t>();
    p.metrics_.heldOutMaeLog = m.at("held_out_mae_log").get<double>();
    p.metrics_.heldOutMedianAbsErrorSeconds = m.at("held_out_median_abs_error_seconds").get<double>();
    p.metrics_.heldOutCoverage90 = m.at("held_out_coverage_q90").get<double>();
    p.metrics_.trainSeconds = m.at("train_seconds").get<double>();
    const std::string booster = doc.at("booster").dump();
    p.booster_ = makeBooster(nullptr);
    check(XGBoosterLoadModelFromBuffer(p.booster_.get(), booster.data(), booster.size()), "loading");
    return p;
}

void WaitPredictor::save(const std::filesystem::path& path) const
{
    // Write aside and rename, so that a crash never leaves a half-written model behind.
    const auto tmp = path.string() + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << toJson().dump();
        out.flush();
        if (!out) {
            std::error_code ignored;
            std::filesystem::remove(tmp, ignored);
            throw std::runtime_error("cannot write " + tmp + " (disk full or not writable?)");
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        throw std::runtime_error("cannot write " + path.string() + ": " + ec.message());
    }
}

WaitPredictor WaitPredictor::load(const std::filesystem::path& path)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error("cannot open model " + path.string());
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(path.string() + ": not a model file: " + e.what());
    }
    try {
        return fromJson(doc);
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(path.string() + ": malformed model: " + e.what());
    }
}

} // namespace baton::sim
