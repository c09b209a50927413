// batond's Prometheus metrics: families made once at start-up, bounded labels only (states, reasons,
// commands; never job or chain ids), base units. render() is the /metrics body.
#pragma once

#include "chain_state.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace baton::service {

class Metrics {
public:
    Metrics();

    std::string render() const;

    prometheus::Gauge& chains(ChainState state) { return *chains_.at(state); }
    prometheus::Gauge& checkpointAge(ChainState state) { return *checkpointAge_.at(state); }
    prometheus::Counter& submissions(const std::string& reason); // first, policy, ahead, reactive, retry, node_failure, resubmit, restart
    prometheus::Counter& submissionFailures() { return *submissionFailures_; }
    prometheus::Counter& handovers(const std::string& outcome); // started, completed, timed_out, requeued
    prometheus::Histogram& interruption() { return *interruption_; }
    prometheus::Histogram& overlap() { return *overlap_; }
    prometheus::Histogram& handoverDuration() { return *handoverDuration_; }
    prometheus::Histogram& predictionError() { return *predictionError_; }
    prometheus::Histogram& slurmCall(const std::string& command);
    prometheus::Counter& slurmErrors(const std::string& command);
    prometheus::Histogram& dbCall() { return *dbCall_; }
    prometheus::Counter& dbErrors() { return *dbErrors_; }
    prometheus::Histogram& tick() { return *tick_; }
    prometheus::Counter& events(const std::string& outcome); // accepted, duplicate, rejected
    prometheus::Counter& pruned(const std::string& table) { return *pruned_.at(table); } // events, decisions
    // A failure that only one chain suffers, by one of chainErrorReasons.
    prometheus::Counter& chainErrors(std::string_view reason) { return *chainErrors_.at(std::string(reason)); }
    static constexpr std::array<std::string_view, 6> chainErrorReasons { "event", "job_row", "slurm", "data",
        "owner_files", "internal" };
    // Children (Slurm commands, spool readers) batond could not end and left to be reaped later.
    prometheus::Gauge& abandonedChildren() { return *abandonedChildren_; }
    prometheus::Gauge& leader() { return *leader_; }
    prometheus::Gauge& ready() { return *ready_; }

private:
    std::shared_ptr<prometheus::Registry> registry_;
    std::map<ChainState, prometheus::Gauge*> chains_, checkpointAge_;
    prometheus::Family<prometheus::Counter>* submissionFamily_;
    prometheus::Counter* submissionFailures_;
    prometheus::Family<prometheus::Counter>* handoverFamily_;
    prometheus::Histogram *interruption_, *overlap_, *handoverDuration_, *predictionError_, *dbCall_, *tick_;
    prometheus::Family<prometheus::Histogram>* slurmCallFamily_;
    prometheus::Family<prometheus::Counter>* slurmErrorFamily_;
    prometheus::Counter* dbErrors_;
    prometheus::Family<prometheus::Counter>* eventFamily_;
    prometheus::Gauge *leader_, *ready_, *abandonedChildren_;
    std::map<std::string, prometheus::Counter*> submissions_, handovers_, slurmErrors_, events_;
    std::map<std::string, prometheus::Histogram*> slurmCalls_;
    std::map<std::string, prometheus::Counter*> pruned_, chainErrors_; // made once: no lock
    std::mutex labelsMutex_; // guards the label caches above
};

// Observes the seconds from construction to destruction into a histogram.
class ScopedTimer {
public:
    explicit ScopedTimer(prometheus::Histogram& histogram)
        : histogram_(histogram)
    { }
    ~ScopedTimer()
    {
        histogram_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    ScopedTimer(const ScopedTimer&) = delete;
    ScopedTimer& operator=(const ScopedTimer&) = delete;

private:
    prometheus::Histogram& histogram_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

} // namespace baton::service
