// baton._native.Policy: when to checkpoint (profiled, adaptive interval; deadline; signals) and when
// to exit. The training loop reports each iteration and each checkpoint's outcome.
#include "bindings.hpp"

#include <cstdio>

#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "baton/ckpt/policy.hpp"
#include "baton/ckpt/tuning.hpp"
#include "convert.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace baton::python {

namespace {

using ckpt::Policy;
using ckpt::PolicyOptions;

void bindPolicyOptions(py::module_& module)
{
    py::class_<PolicyOptions>(module, "PolicyOptions")
        .def(py::init<>())
        .def_static(
            "from_environment",
            [](PolicyOptions options) { return ckpt::applyEnvironment(std::move(options)); },
            "options"_a = PolicyOptions {},
            "Applies BATON_OVERHEAD, BATON_DEADLINE and BATON_DEADLINE_MARGIN over `options`.")
        .def_readwrite("target_percent", &PolicyOptions::targetPercent)
        .def_readwrite("profile_iterations", &PolicyOptions::profileIterations)
        .def_readwrite("deadline", &PolicyOptions::deadline)
        .def_readwrite("deadline_margin", &PolicyOptions::deadlineMargin)
        .def_readwrite("safety_factor", &PolicyOptions::safetyFactor)
        .def_property(
            "previous",
            [](const PolicyOptions& o) -> py::object {
                if (!o.previous) {
                    return py::none();
                }
                nlohmann::json json = *o.previous;
                return fromJson(json);
            },
            [](PolicyOptions& o, py::handle tuning) {
                if (tuning.is_none()) {
                    o.previous.reset();
                } else {
                    o.previous = toJson(tuning).get<ckpt::TuningState>();
                }
            },
            "The previous job's tuning state (the manifest's `tuning` field), or None.");

    py::class_<ckpt::Decision>(module, "Decision")
        .def_readonly("checkpoint", &ckpt::Decision::checkpoint)
        .def_readonly("final", &ckpt::Decision::final)
        .def_property_readonly(
            "reason", [](const ckpt::Decision& d) { return std::string(ckpt::toString(d.reason)); });
}

} // namespace

void bindPolicy(py::module_& module)
{
    bindPolicyOptions(module);
    py::class_<Policy>(module, "Policy")
        .def(py::init<PolicyOptions>(), "options"_a = PolicyOptions {})
        .def(
            "log_to_stderr",
            [](Policy& p) {
                p.onLog([](const std::string& line) { std::fprintf(stderr, "baton: %s\n", line.c_str()); });
            },
            "Writes every interval change and its reason to standard error.")
        .def("set_checkpoint_bytes", &Policy::setCheckpointBytes, "bytes"_a)
        .def("set_device_memory", &Policy::setDeviceMemory, "peak_bytes"_a, "total_bytes"_a)
        .def_property_readonly("snapshot_target",
            [](const Policy& p) { return std::string(ckpt::toString(p.snapshotTarget())); })
        .def("set_deadline", &Policy::setDeadline, "deadline"_a)
        .def("enable_signals", &Policy::enableSignals, "usr1"_a = true, "term"_a = true,
            "Installs SIGUSR1/SIGTERM handlers that only set flags, read at the next iteration boundary.")
        .def("disable_signals", &Policy::disableSignals)
        .def("request_checkpoint", &Policy::requestCheckpoint, "exit_after"_a = false)
        .def("on_iteration", &Policy::onIteration, "iteration_seconds"_a, "update_seconds"_a = -1.0,
            "An iteration boundary: returns whether to start a checkpoint now.")
        .def("tick", &Policy::tick)
        .def(
            "checkpoint_committed",
            [](Policy& p, double snapshotSeconds, double persistSeconds, std::uint64_t bytes) {
                p.checkpointCommitted({ snapshotSeconds, persistSeconds, bytes });
            },
            "snapshot_seconds"_a, "persist_seconds"_a, "bytes"_a)
        .def("checkpoint_failed", &Policy::checkpointFailed, "why"_a)
        .def_property_readonly("should_exit", &Policy::shouldExit)
        .def_property_readonly("profiling", &Policy::profiling)
        .def_property_readonly("checkpoint_in_flight", &Policy::checkpointInFlight)
        .def_property_readonly("interval", &Policy::interval)
        .def_property_readonly("measured_overhead_percent", &Policy::measuredOverheadPercent)
        .def_property_readonly("iterations", &Policy::iterations)
        .def_property_readonly("tuning",
            [](const Policy& p) {
                nlohmann::json json = p.tuning();
                return fromJson(json);
            })
        .def_property_readonly("changes", [](const Policy& p) {
            py::list changes;
            for (const auto& c : p.changes()) {
                changes.append(py::dict("cycle"_a = c.cycle, "from"_a = c.from, "to"_a = c.to,
                    "measured_overhead_percent"_a = c.measuredOverheadPercent, "reason"_a = c.reason));
            }
            return changes;
        });
}

} // namespace baton::python
