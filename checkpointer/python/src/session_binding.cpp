// baton._native.Session: the checkpointer driven by its policy, one call per iteration.
#include "bindings.hpp"

#include <memory>
#include <string>

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
        RegionOwner::close();
        sampler_ = py::none();
    }

private:
    py::object sampler_ = py::none();
};

} // namespace

void bindSession(py::module_& module)
{
    py::class_<SessionOptions>(module, "SessionOptions")
        .def(py::init<>())
        .def_static("from_environment", &SessionOptions::fromEnvironment,
            "BATON_CHAIN_DIR, BATON_KEEP, BATON_JOB_ID, BATON_CHAIN_SEQ, BATON_HANDOVER_WAIT, "
            "BATON_OVERHEAD, "
            "BATON_DEADLINE, BATON_DEADLINE_MARGIN.")
        .def_readwrite("checkpointer", &SessionOptions::checkpointer)
        .def_readwrite("policy", &SessionOptions::policy)
        .def_readwrite("handle_signals", &SessionOptions::handleSignals);

    using Self = PySession;
    py::class_<Self>(module, "Session",
        "The checkpointer driven by its policy: call before_update() before and step(i) after "
        "each weight update; stop when should_exit.")
        .def(py::init<SessionOptions>(), "options"_a)
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
            "step", [](Self& self, std::uint64_t iteration) { return self.impl().step(iteration); },
            "iteration"_a, py::call_guard<py::gil_scoped_release>(),
            "The end of iteration `iteration`: may start a checkpoint (and wait for a final one).")
        .def(
            "finish", [](Self& self) { return self.impl().finish(); },
            py::call_guard<py::gil_scoped_release>(),
            "Waits for an in-flight checkpoint; after mark_training_done() commits a final checkpoint with "
            "training_done. Returns whether the last checkpoint committed.")
        .def(
            "mark_training_done", [](Self& self) { self.impl().markTrainingDone(); },
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
}

} // namespace baton::python
