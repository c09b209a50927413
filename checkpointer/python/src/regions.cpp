#include "regions.hpp"

#include <cstdint>

#include <pybind11/stl.h>

#include "convert.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace baton::python {

void registerObject(ckpt::Checkpointer& checkpointer, const std::string& name, py::handle object)
{
    Memory memory = memoryOf(object, name);
    if (memory.device >= 0) {
        py::module_ torch = py::module_::import("torch");
        py::object stream = torch.attr("cuda").attr("current_stream")(memory.device).attr("cuda_stream");
        auto streamHandle = reinterpret_cast<void*>(stream.cast<std::uintptr_t>());
        py::gil_scoped_release release;
        checkpointer.registerDeviceRegion(name, memory.data, memory.size, memory.device, streamHandle);
    } else {
        py::gil_scoped_release release;
        checkpointer.registerRegion(name, memory.data, memory.size);
    }
}

py::object restoreResultToPython(const ckpt::RestoreResult& result)
{
    py::dict blobs;
    for (const auto& [name, bytes] : result.blobs) {
        blobs[py::str(name)] = py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    py::list fallbacks;
    for (const auto& fallback : result.fallbacks) {
        fallbacks.append(py::make_tuple(fallback.dir.string(), fallback.reason));
    }
    py::object record = py::module_::import("types").attr("SimpleNamespace");
    return record("restored"_a = result.restored, "iteration"_a = result.iteration, "epoch"_a = result.epoch,
        "dir"_a = result.dir.string(), "blobs"_a = blobs,
        "manifest"_a = result.restored ? fromJson(result.manifest) : py::dict(), "fallbacks"_a = fallbacks,
        "unclaimed_regions"_a = py::cast(result.unclaimedRegions), "job_id"_a = py::cast(result.jobId),
        "chain_seq"_a = py::cast(result.chainSeq),
        "restart_count"_a = py::cast(result.chainSeq), // deprecated alias of chain_seq
        "final"_a = result.final, "training_done"_a = result.trainingDone,
        "handover_wait_seconds"_a = result.handoverWaitSeconds,
        "handover_timed_out"_a = result.handoverTimedOut, "node_local"_a = result.nodeLocal);
}

} // namespace baton::python
