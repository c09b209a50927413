// baton._native.Session: the checkpointer driven by its policy, one call per iteration.
#include "bindings.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "baton/ckpt/session.hpp"
#include "convert.hpp"
#include "regions.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace baton::python {

namespace {

using ckpt::Session;
using ckpt::SessionOptions;

// Keeps the registered objects and the attached sampler alive for as long as the session uses them.
class PySession : public RegionOwner<Session> {
public:
    explicit PySession(SessionOptions options)
        : RegionOwner(std::make_unique<Session>(std::move(options)), "the session is closed")
    { }

    // Drives a baton._native.Checkpointer, which the session keeps alive.
    PySession(py::object checkpointer, SessionOptions options)
        : RegionOwner(
            std::make_unique<Session>(checkpointer.cast<PyCheckpointer&>().impl(), std::move(options)),
            "the session is closed")
        , checkpointer_(std::move(checkpointer))
    {
        // Closed under the session, the checkpointer takes no closing checkpoint of the session's.
        checkpointer_.cast<PyCheckpointer&>().setDriver([this] {
            impl().markTrainingDone(false);
            close();
        });
    }

    // Closes first: the sampler must outlive the session, which is held by the base.
    ~PySession() { close(); }

    void attachSampler(py::object sampler)
    {
        impl().attachSampler(sampler.is_none() ? nullptr : &sampler.cast<ckpt::ResumableSampler&>());
        sampler_ = std::move(sampler);
    }

    // Waits for an in-flight checkpoint, reports it to the policy and lets go of the registered memory.
    void close()
    {
        if (!checkpointer_.is_none())
            checkpointer_.cast<PyCheckpointer&>().setDriver(nullptr);
        RegionOwner::close();
        sampler_ = py::none();
    }

private:
    py::object sampler_ = py::none();
    py::object checkpointer_ = py::none();
};

// The Python hook sees and returns plain flags; another rank's checkpoint is, for this one, requested.
void agreeDecision(PySession& self, std::function<std::pair<bool, bool>(bool, bool)> hook)
{
    self.impl().agreeDecision([hook = std::move(hook)](const ckpt::Decision& decision) {
        const auto [checkpoint, final] = hook(decision.checkpoint, decision.final);
        ckpt::Decision agreed { checkpoint, final, decision.reason };
        if (checkpoint && !decision.checkpoint)
            agreed.reason = ckpt::CheckpointReason::Requested;
        return agreed;
    });
}

void bindOptions(py::module_& module)
{
    py::class_<SessionOptions>(module, "SessionOptions")
        .def(py::init<>())
        .def_static("from_environment", &SessionOptions::fromEnvironment,
            "BATON_CHAIN_DIR, BATON_KEEP, BATON_JOB_ID, BATON_CHAIN_SEQ, BATON_HANDOVER_WAIT, "
            "BATON_OVERHEAD, "
            "BATON_DEADLINE, BATON_DEADLINE_MARGIN.")
        .def_readwrite("checkpointer", &SessionOptions::checkpointer)
        .def_readwrite("policy", &SessionOptions::policy)
        .def_readwrite("handle_signals", &SessionOptions::handleSignals)
        .def_readwrite("fixed_interval", &SessionOptions::fixedInterval,
            "Checkpoint every this many iterations instead of asking the policy (0: the policy decides).")
        .def_readwrite("wait_for_in_flight", &SessionOptions::waitForInFlight,
            "A checkpoint due while one is in flight waits for it instead of being dropped.");
}

// What a caller that stages its own state and agrees with other ranks adds to the loop (baton.torch).
void bindHooks(py::class_<PySession>& session)
{
    using Self = PySession;
    session
        .def(
            "collect", [](Self& self, bool wait) { self.impl().collect(wait); }, "wait"_a = false,
            py::call_guard<py::gil_scoped_release>(),
            "Reports a checkpoint that step() started and that has ended (with `wait`: waits for it) to the "
            "policy.")
        .def(
            "before_checkpoint",
            [](Self& self, std::function<void(std::uint64_t)> hook) {
                self.impl().beforeCheckpoint(std::move(hook));
            },
            "hook"_a, "hook(iteration) runs right before each checkpoint starts, to stage blobs and fields.")
        .def_property_readonly(
            "starting_final", [](Self& self) { return self.impl().startingFinal(); },
            "In the before_checkpoint hook: whether the checkpoint about to start is a final one.")
        .def("agree_decision", &agreeDecision, "hook"_a,
            "hook(checkpoint, final) -> (checkpoint, final) turns each step's decision into the one all "
            "ranks take; it runs at every step().")
        .def_property_readonly(
            "policy", [](Self& self) -> ckpt::Policy& { return self.impl().policy(); },
            py::return_value_policy::reference_internal);
}

} // namespace

void bindSession(py::module_& module)
{
    bindOptions(module);
    using Self = PySession;
    py::class_<Self> session(module, "Session",
        "The checkpointer driven by its policy: call before_update() before and step(i) after "
        "each weight update; stop when should_exit.");
    session.def(py::init<SessionOptions>(), "options"_a)
        .def(py::init<py::object, SessionOptions>(), "checkpointer"_a, "options"_a,
            "Drives an existing Checkpointer; options.checkpointer is unused.")
        .def("register_region", &Self::registerRegion, "name"_a, "memory"_a)
        .def("unregister_region", &Self::unregisterRegion, "name"_a)
        .def(
            "set_blob",
            [](Self& self, const std::string& name, const py::bytes& bytes) {
                self.impl().checkpointer().setBlob(name, std::string_view(bytes));
            },
            "name"_a, "data"_a)
        .def(
            "set_manifest_field",
            [](Self& self, const std::string& key, py::handle value) {
                self.impl().checkpointer().setManifestField(key, toJson(value));
            },
            "key"_a, "value"_a)
        .def("attach_sampler", &Self::attachSampler, "sampler"_a,
            "Its state rides in every manifest and is restored by restore(); None detaches it.")
        .def("restore", &Self::restore)
        .def(
            "request_checkpoint",
            [](Self& self, bool exitAfter) { self.impl().requestCheckpoint(exitAfter); },
            "exit_after"_a = false,
            "Checkpoint at the next step() (a handover); `exit_after` makes it the final one.")
        .def(
            "before_update", [](Self& self) { self.impl().beforeUpdate(); },
            py::call_guard<py::gil_scoped_release>())
        .def(
            "step",
            [](Self& self, std::uint64_t iteration, std::optional<double> updateSeconds) {
                return updateSeconds ? self.impl().step(iteration, *updateSeconds)
                                     : self.impl().step(iteration);
            },
            "iteration"_a, "update_seconds"_a = py::none(), py::call_guard<py::gil_scoped_release>(),
            "The end of iteration `iteration`: may start a checkpoint (and wait for a final one). "
            "`update_seconds`: the weight update's duration, when the caller timed it.")
        .def(
            "finish", [](Self& self) { return self.impl().finish(); },
            py::call_guard<py::gil_scoped_release>(),
            "Waits for an in-flight checkpoint; after mark_training_done() commits a final checkpoint with "
            "training_done. Returns whether the last checkpoint committed.")
        .def(
            "mark_training_done", [](Self& self, bool done) { self.impl().markTrainingDone(done); },
            "done"_a = true,
            "The training is complete: finish() writes a final checkpoint with training_done.")
        .def_property_readonly("should_exit", [](Self& self) { return self.impl().shouldExit(); })
        .def_property_readonly("interval", [](Self& self) { return self.impl().interval(); })
        .def_property_readonly(
            "measured_overhead_percent", [](Self& self) { return self.impl().measuredOverheadPercent(); })
        .def_property_readonly("tuning",
            [](Self& self) {
                nlohmann::json json = self.impl().policy().tuning();
                return fromJson(json);
            })
        .def("last_checkpoint", [](Self& self) { return self.impl().checkpointer().lastCheckpoint(); })
        .def("counters", [](Self& self) { return self.impl().checkpointer().counters(); })
        .def_property_readonly(
            "last_error", [](Self& self) { return self.impl().checkpointer().lastError(); })
        .def("close", &Self::close);
    bindHooks(session);
}

} // namespace baton::python
