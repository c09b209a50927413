// `batonctl sim`: the command line of the queue simulator (../sim) and the policies it evaluates
// (../policy). sim_command.cpp declares the commands and their options, sim_input.cpp turns options into
// the simulator's input, sim_fit.cpp is `sim fit`, sim_compare.cpp `sim run` and `sim compare` with
// their tables and files.
#pragma once

#include "cli/command_line.hpp"
#include "sim/comparison.hpp"
#include "sim/simulator.hpp"
#include "sim/trace_input.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace baton::sim::cli {

// Options and the simulator's input (sim_input.cpp). Bad values throw std::invalid_argument.
std::int64_t parseDate(const std::string& s); // YYYY-MM-DD, UTC
std::string formatDate(std::int64_t t);
// An option in hours as whole seconds, at least `minimumSeconds`.
std::int64_t hoursOption(const ctl::ParsedCommand& o, std::string_view name, std::int64_t minimumSeconds);
int nonNegativeInteger(const ctl::ParsedCommand& o, std::string_view name);
// Loads the trace and says on stderr what could not be used.
LoadedJobs loadReported(const ctl::ParsedCommand& o);
std::string partitionLabel(const std::string& name);
// --partition, else the partition with most jobs (said on stderr when there is more than one).
std::string choosePartition(const ctl::ParsedCommand& o, const LoadedJobs& loaded);
void requireNodeSize(const LoadedJobs& loaded);
// The SWF header's machine size in units, if it gives one.
std::optional<int> headerCapacity(const LoadedJobs& loaded);
// Per-user limits and how jobs age, from the options every replay shares.
void applyQueueRules(const ctl::ParsedCommand& o, SchedulerConfig& c);
SchedulerConfig schedulerFrom(const ctl::ParsedCommand& o, const LoadedJobs& loaded);
// The partition's jobs, prepared for a cluster of `capacity` units; what was dropped is said on stderr.
std::shared_ptr<const std::vector<Job>> prepared(const std::string& path, const LoadedJobs& loaded,
    const std::string& partition, int capacity, Dropped& dropped);
ComparisonConfig comparisonFrom(
    const ctl::ParsedCommand& o, const std::vector<Job>& trace, const SchedulerConfig& scheduler);

// `sim fit` (sim_fit.cpp).
int fitCommand(const ctl::ParsedCommand& o);
// `sim run` (one policy, no files) and `sim compare` (sim_compare.cpp).
int compareCommand(const ctl::ParsedCommand& o, std::vector<std::string> policies, bool writeFiles);

} // namespace baton::sim::cli
