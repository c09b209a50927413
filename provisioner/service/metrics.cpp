#include "metrics.hpp"

#include <prometheus/text_serializer.h>

#include <sstream>

namespace baton::service {

namespace {

using prometheus::Histogram;

// Seconds from 1 s to about 2 days: gaps and overlaps of chain jobs.
Histogram::BucketBoundaries intervalBuckets()
{
    return { 1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400, 172800 };
}

// Seconds from 1 ms to 1 min: calls and ticks.
Histogram::BucketBoundaries latencyBuckets()
{
    return { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
}

template<typename Map, typename Family>
auto& labelled(Map& cache, Family* family, const std::string& label, const std::string& value)
{
    auto found = cache.find(value);
    if (found == cache.end())
        found = cache.emplace(value, &family->Add({ { label, value } })).first;
    return *found->second;
}

} // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>())
{
    auto& chains = prometheus::BuildGauge().Name("baton_chains").Help("Chains by state").Register(*registry_);
    auto& age = prometheus::BuildGauge()
                    .Name("baton_checkpoint_age_seconds")
                    .Help("Age of the oldest newest-checkpoint among the chains in each state")
                    .Register(*registry_);
    for (const auto& [state, name] : chainStateNames) {
        chains_[state] = &chains.Add({ { "state", std::string(name) } });
        checkpointAge_[state] = &age.Add({ { "state", std::string(name) } });
    }
    submissionFamily_ = &prometheus::BuildCounter()
                             .Name("baton_submissions_total")
                             .Help("Jobs submitted for chains, by reason")
                             .Register(*registry_);
    for (const char* reason : { "first", "policy", "reactive", "retry", "node_failure", "resubmit", "restart" })
        submissions(reason);
    submissionFailures_ = &prometheus::BuildCounter()
                               .Name("baton_submission_failures_total")
                               .Help("sbatch calls that failed")
                               .Register(*registry_)
                               .Add({});
    handoverFamily_ = &prometheus::BuildCounter()
                           .Name("baton_handovers_total")
                           .Help("Handovers by outcome (started, completed, timed_out; requeued: a predecessor that Slurm "
                                 "requeued, cancelled)")
                           .Register(*registry_);
    for (const char* outcome : { "started", "completed", "timed_out", "requeued" })
        handovers(outcome);
    interruption_ = &prometheus::BuildHistogram()
                         .Name("baton_interruption_seconds")
                         .Help("Gap between a chain job's end and its successor's start")
                         .Register(*registry_)
                         .Add({}, intervalBuckets());
    overlap_ = &prometheus::BuildHistogram()
                    .Name("baton_overlap_seconds")
                    .Help("Time a successor ran while its predecessor still ran")
                    .Register(*registry_)
                    .Add({}, intervalBuckets());
    handoverDuration_ = &prometheus::BuildHistogram()
                             .Name("baton_handover_duration_seconds")
                             .Help("From signalling the predecessor to its end")
                             .Register(*registry_)
                             .Add({}, intervalBuckets());
    predictionError_ = &prometheus::BuildHistogram()
                            .Name("baton_prediction_error_seconds")
                            .Help("Absolute error of the predicted queue wait of submitted successors")
                            .Register(*registry_)
                            .Add({}, intervalBuckets());
    slurmCallFamily_ = &prometheus::BuildHistogram()
                            .Name("baton_slurm_call_duration_seconds")
                            .Help("Duration of Slurm commands, by command")
                            .Register(*registry_);
    slurmErrorFamily_ = &prometheus::BuildCounter()
                             .Name("baton_slurm_call_errors_total")
                             .Help("Slurm commands that failed, by command")
                             .Register(*registry_);
    for (const char* command : { "squeue", "sbatch", "scancel", "scontrol" }) {
        slurmCall(command);
        slurmErrors(command);
    }
    dbCall_ = &prometheus::BuildHistogram()
                   .Name("baton_db_call_duration_seconds")
                   .Help("Duration of database transactions")
                   .Register(*registry_)
                   .Add({}, latencyBuckets());
    dbErrors_ = &prometheus::BuildCounter()
                     .Name("baton_db_errors_total")
                     .Help("Database calls that failed")
                     .Register(*registry_)
                     .Add({});
    tick_ = &prometheus::BuildHistogram()
                 .Name("baton_tick_duration_seconds")
                 .Help("Duration of one policy tick")
                 .Register(*registry_)
                 .Add({}, latencyBuckets());
    eventFamily_ = &prometheus::BuildCounter()
                        .Name("baton_events_total")
                        .Help("Events received, by outcome (accepted, duplicate, rejected)")
                        .Register(*registry_);
    for (const char* outcome : { "accepted", "duplicate", "rejected" })
        events(outcome);
    auto& prunedFamily = prometheus::BuildCounter()
                             .Name("baton_pruned_rows_total")
                             .Help("Rows deleted after the retention period, by table (events, decisions)")
                             .Register(*registry_);
    for (const char* table : { "events", "decisions" })
        pruned_[table] = &prunedFamily.Add({ { "table", table } });
    auto& chainErrorFamily = prometheus::BuildCounter()
                                 .Name("baton_chain_errors_total")
                                 .Help("Failures confined to one chain, by reason (event: an event set aside; job_row:"
                                       " a job row refused; slurm: a Slurm action for the chain failed; data: the"
                                       " database refused the chain's data; internal: anything else)")
                                 .Register(*registry_);
    for (const std::string_view reason : chainErrorReasons)
        chainErrors_[std::string(reason)] = &chainErrorFamily.Add({ { "reason", std::string(reason) } });
    abandonedChildren_ = &prometheus::BuildGauge()
                              .Name("baton_abandoned_children")
                              .Help("Child processes batond could not end within their timeout and left to be"
                                    " reaped later (since start)")
                              .Register(*registry_)
                              .Add({});
    leader_ = &prometheus::BuildGauge()
                   .Name("baton_leader")
                   .Help("1 while this instance is the active one")
                   .Register(*registry_)
                   .Add({});
    ready_ = &prometheus::BuildGauge()
                  .Name("baton_ready")
                  .Help("1 while the database and Slurm answer")
                  .Register(*registry_)
                  .Add({});
}

// Families are made in the constructor only; these look up (or add, for a label value not seen
// before, from a fixed small set) under prometheus-cpp's own locking.
prometheus::Counter& Metrics::submissions(const std::string& reason)
{
    const std::lock_guard lock(labelsMutex_);
    return labelled(submissions_, submissionFamily_, "reason", reason);
}

prometheus::Counter& Metrics::handovers(const std::string& outcome)
{
    const std::lock_guard lock(labelsMutex_);
    return labelled(handovers_, handoverFamily_, "outcome", outcome);
}

prometheus::Histogram& Metrics::slurmCall(const std::string& command)
{
    const std::lock_guard lock(labelsMutex_);
    auto found = slurmCalls_.find(command);
    if (found == slurmCalls_.end())
        found = slurmCalls_
                    .emplace(command, &slurmCallFamily_->Add({ { "command", command } }, latencyBuckets()))
                    .first;
    return *found->second;
}

prometheus::Counter& Metrics::slurmErrors(const std::string& command)
{
    const std::lock_guard lock(labelsMutex_);
    return labelled(slurmErrors_, slurmErrorFamily_, "command", command);
}

prometheus::Counter& Metrics::events(const std::string& outcome)
{
    const std::lock_guard lock(labelsMutex_);
    return labelled(events_, eventFamily_, "outcome", outcome);
}

std::string Metrics::render() const
{
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    return out.str();
}

} // namespace baton::service
