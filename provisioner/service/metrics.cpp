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

// Each family's name and help text: what dashboards and alerts know, so they stay exactly as they are.
struct FamilyText {
    const char* name;
    const char* help;
};
constexpr FamilyText chainsText { "baton_chains", "Chains by state" };
constexpr FamilyText checkpointAgeText { "baton_checkpoint_age_seconds",
    "Age of the oldest newest-checkpoint among the chains in each state" };
constexpr FamilyText submissionsText { "baton_submissions_total", "Jobs submitted for chains, by reason" };
constexpr FamilyText submissionFailuresText { "baton_submission_failures_total", "sbatch calls that failed" };
constexpr FamilyText handoversText { "baton_handovers_total",
    "Handovers by outcome (started, completed, timed_out; requeued: a predecessor that Slurm "
    "requeued, cancelled)" };
constexpr FamilyText interruptionText { "baton_interruption_seconds",
    "Gap between a chain job's end and its successor's start" };
constexpr FamilyText overlapText { "baton_overlap_seconds", "Time a successor ran while its predecessor still ran" };
constexpr FamilyText handoverDurationText { "baton_handover_duration_seconds",
    "From asking the predecessor to stop (the request in its chain directory) to its end" };
constexpr FamilyText predictionErrorText { "baton_prediction_error_seconds",
    "Absolute error of the predicted queue wait of submitted successors" };
constexpr FamilyText slurmCallText { "baton_slurm_call_duration_seconds", "Duration of Slurm commands, by command" };
constexpr FamilyText slurmErrorsText { "baton_slurm_call_errors_total", "Slurm commands that failed, by command" };
constexpr FamilyText dbCallText { "baton_db_call_duration_seconds", "Duration of database transactions" };
constexpr FamilyText dbErrorsText { "baton_db_errors_total", "Database calls that failed" };
constexpr FamilyText tickText { "baton_tick_duration_seconds", "Duration of one policy tick" };
constexpr FamilyText eventsText { "baton_events_total", "Events received, by outcome (accepted, duplicate, rejected)" };
constexpr FamilyText prunedText { "baton_pruned_rows_total",
    "Rows deleted after the retention period, by table (events, decisions)" };
constexpr FamilyText chainErrorsText { "baton_chain_errors_total",
    "Failures confined to one chain, by reason (event: an event set aside; job_row:"
    " a job row refused; slurm: a Slurm action for the chain failed; data: the"
    " database refused the chain's data; owner_files: a file of the chain directory"
    " batond writes as its owner could not be written; internal: anything else)" };
constexpr FamilyText abandonedChildrenText { "baton_abandoned_children",
    "Child processes batond could not end within their timeout and left to be"
    " reaped later (since start)" };
constexpr FamilyText leaderText { "baton_leader", "1 while this instance is the active one" };
constexpr FamilyText readyText { "baton_ready", "1 while the database and Slurm answer" };

// Registers the family named by `text` with a prometheus Build* builder.
template<typename Builder>
auto& family(Builder builder, const FamilyText& text, prometheus::Registry& registry)
{
    return builder.Name(text.name).Help(text.help).Register(registry);
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
    auto& registry = *registry_;
    auto& chains = family(prometheus::BuildGauge(), chainsText, registry);
    auto& age = family(prometheus::BuildGauge(), checkpointAgeText, registry);
    for (const auto& [state, name] : chainStateNames) {
        chains_[state] = &chains.Add({ { "state", std::string(name) } });
        checkpointAge_[state] = &age.Add({ { "state", std::string(name) } });
    }
    submissionFamily_ = &family(prometheus::BuildCounter(), submissionsText, registry);
    for (const char* reason : { "first", "policy", "ahead", "reactive", "retry", "node_failure", "resubmit", "restart" })
        submissions(reason);
    submissionFailures_ = &family(prometheus::BuildCounter(), submissionFailuresText, registry).Add({});
    handoverFamily_ = &family(prometheus::BuildCounter(), handoversText, registry);
    for (const char* outcome : { "started", "completed", "timed_out", "requeued" })
        handovers(outcome);
    interruption_ = &family(prometheus::BuildHistogram(), interruptionText, registry).Add({}, intervalBuckets());
    overlap_ = &family(prometheus::BuildHistogram(), overlapText, registry).Add({}, intervalBuckets());
    handoverDuration_
        = &family(prometheus::BuildHistogram(), handoverDurationText, registry).Add({}, intervalBuckets());
    predictionError_
        = &family(prometheus::BuildHistogram(), predictionErrorText, registry).Add({}, intervalBuckets());
    slurmCallFamily_ = &family(prometheus::BuildHistogram(), slurmCallText, registry);
    slurmErrorFamily_ = &family(prometheus::BuildCounter(), slurmErrorsText, registry);
    for (const char* command : { "squeue", "sbatch", "scancel", "scontrol" }) {
        slurmCall(command);
        slurmErrors(command);
    }
    dbCall_ = &family(prometheus::BuildHistogram(), dbCallText, registry).Add({}, latencyBuckets());
    dbErrors_ = &family(prometheus::BuildCounter(), dbErrorsText, registry).Add({});
    tick_ = &family(prometheus::BuildHistogram(), tickText, registry).Add({}, latencyBuckets());
    eventFamily_ = &family(prometheus::BuildCounter(), eventsText, registry);
    for (const char* outcome : { "accepted", "duplicate", "rejected" })
        events(outcome);
    auto& prunedFamily = family(prometheus::BuildCounter(), prunedText, registry);
    for (const char* table : { "events", "decisions" })
        pruned_[table] = &prunedFamily.Add({ { "table", table } });
    auto& chainErrorFamily = family(prometheus::BuildCounter(), chainErrorsText, registry);
    for (const std::string_view reason : chainErrorReasons)
        chainErrors_[std::string(reason)] = &chainErrorFamily.Add({ { "reason", std::string(reason) } });
    abandonedChildren_ = &family(prometheus::BuildGauge(), abandonedChildrenText, registry).Add({});
    leader_ = &family(prometheus::BuildGauge(), leaderText, registry).Add({});
    ready_ = &family(prometheus::BuildGauge(), readyText, registry).Add({});
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
