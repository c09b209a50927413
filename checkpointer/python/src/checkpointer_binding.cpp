// baton._native.Checkpointer and its Options, results and statistics.
#include "bindings.hpp"

#include <memory>
#include <string>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "baton/ckpt/checkpointer.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/error.hpp"
#include "baton/ckpt/options.hpp"
#include "convert.hpp"
#include "regions.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace baton::python {

namespace {

using ckpt::Checkpointer;

// A coordinator whose all-gather is a Python callable (baton.torch passes one over a gloo group). It is
// called from the checkpointer's persist thread as well: the GIL is taken for each call, and a Python
// exception becomes a CoordinationError (the checkpoint fails, training goes on).
class CallbackCoordinator final : public ckpt::Coordinator {
public:
    using AllGather = std::function<std::vector<py::bytes>(const std::string&, const py::bytes&)>;

    CallbackCoordinator(int rank, int size, AllGather allGather)
        : rank_(rank)
        , size_(size)
        , allGather_(std::move(allGather))
    {
        if (size < 1 || rank < 0 || rank >= size)
            throw ckpt::ConfigError("rank " + std::to_string(rank) + " of world size " + std::to_string(size)
                + " is impossible (0 <= rank < size)");
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }

    std::vector<std::string> allGather(std::string_view key, std::string_view bytes) override
    {
        py::gil_scoped_acquire gil;
        try {
            auto gathered = allGather_(std::string(key), py::bytes(bytes.data(), bytes.size()));
            if (gathered.size() != static_cast<std::size_t>(size_))
                throw ckpt::CoordinationError("coordinator: all_gather returned "
                    + std::to_string(gathered.size()) + " items for a world of " + std::to_string(size_));
            std::vector<std::string> result;
            for (const auto& item : gathered)
                result.emplace_back(item);
            return result;
        } catch (py::error_already_set& e) {
            throw ckpt::CoordinationError(std::string("coordinator: ") + e.what());
        }
    }

private:
    int rank_;
    int size_;
    AllGather allGather_;
};

void bindCoordinators(py::module_& module)
{
    py::class_<ckpt::Coordinator, std::shared_ptr<ckpt::Coordinator>>(
        module, "Coordinator", "How the ranks of a job agree (all-gather of small byte strings).")
        .def_property_readonly("rank", &ckpt::Coordinator::rank)
        .def_property_readonly("size", &ckpt::Coordinator::size)
        .def(
            "all_gather",
            [](ckpt::Coordinator& self, const std::string& key, const py::bytes& bytes) {
                std::string data(bytes);
                std::vector<std::string> all;
                {
                    py::gil_scoped_release release;
                    all = self.allGather(key, data);
                }
                py::list result;
                for (const auto& item : all)
                    result.append(py::bytes(item));
                return result;
            },
            "key"_a, "data"_a);
    py::class_<ckpt::FileCoordinator, ckpt::Coordinator, std::shared_ptr<ckpt::FileCoordinator>>(module,
        "FileCoordinator", "Coordinates through files in the shared chain directory; needs no framework.")
        .def(py::init([](const std::string& chainDir, const std::string& session, int rank, int size,
                          double timeoutSeconds) {
            return std::make_shared<ckpt::FileCoordinator>(chainDir, session, rank, size,
                std::chrono::milliseconds(static_cast<long long>(timeoutSeconds * 1000)));
        }),
            "chain_dir"_a, "session"_a, "rank"_a, "size"_a, "timeout_seconds"_a = 600.0)
        .def_static(
            "from_environment",
            [](const std::string& chainDir) -> std::shared_ptr<ckpt::FileCoordinator> {
                return ckpt::FileCoordinator::fromEnvironment(chainDir);
            },
            "chain_dir"_a, "None for a world of one process.");
    py::class_<CallbackCoordinator, ckpt::Coordinator, std::shared_ptr<CallbackCoordinator>>(module,
        "CallbackCoordinator",
        "A coordinator whose all_gather(key: str, data: bytes) -> list of bytes (one per rank) is a Python "
        "callable; it may be called from a background thread.")
        .def(py::init<int, int, CallbackCoordinator::AllGather>(), "rank"_a, "size"_a, "all_gather"_a);
}

void bindOptions(py::module_& module)
{
    py::class_<ckpt::Options>(module, "Options",
        "Settings of a Checkpointer (BATON_CHAIN_DIR, BATON_KEEP, BATON_JOB_ID, BATON_CHAIN_SEQ, "
        "BATON_HANDOVER_WAIT).")
        .def(py::init<>())
        .def_static("from_environment", &ckpt::Options::fromEnvironment,
            "Reads BATON_CHAIN_DIR, BATON_KEEP, BATON_JOB_ID, BATON_CHAIN_SEQ and BATON_HANDOVER_WAIT; "
            "raises ConfigError naming the variable when unusable.")
        .def_property(
            "chain_dir", [](const ckpt::Options& o) { return o.chainDir.string(); },
            [](ckpt::Options& o, const std::string& dir) { o.chainDir = dir; })
        .def_readwrite("keep", &ckpt::Options::keep)
        .def_readwrite("staging_bytes", &ckpt::Options::stagingBytes)
        .def_readwrite("copy_threads", &ckpt::Options::copyThreads)
        .def_readwrite("direct_io", &ckpt::Options::directIo)
        .def_readwrite("file_mode", &ckpt::Options::fileMode,
            "Permissions of checkpoint files (default 0o600; directories get search bits: 0o700).")
        .def_readwrite("job_id", &ckpt::Options::jobId, "Recorded in every manifest; None: BATON_JOB_ID.")
        .def_readwrite("chain_seq", &ckpt::Options::chainSeq,
            "The job's position in its chain, recorded in every manifest; None: BATON_CHAIN_SEQ.")
        .def_readwrite("restart_count", &ckpt::Options::chainSeq, "Deprecated alias of chain_seq.")
        .def_readwrite("coordinator", &ckpt::Options::coordinator,
            "The ranks that checkpoint together (None: this process alone).")
        .def_readwrite("handover_wait_seconds", &ckpt::Options::handoverWaitSeconds,
            "restore() in a successor job waits up to this long for the predecessor's final checkpoint.")
        .def_property(
            "local_dir", [](const ckpt::Options& o) { return o.localDir.string(); },
            [](ckpt::Options& o, const std::string& dir) { o.localDir = dir; },
            "Two-level storage: commit to this node-local directory first, drain to chain_dir in the "
            "background (BATON_LOCAL_DIR; empty: one level).")
        .def_readwrite("local_keep", &ckpt::Options::localKeep, "Checkpoints kept node-locally.")
        .def_readwrite("drain_bytes_per_second", &ckpt::Options::drainBytesPerSecond,
            "The drain's rate bound (0: unbounded).")
        .def_readwrite("node_name", &ckpt::Options::nodeName, "Recorded in node-local manifests.")
        .def("validate", &ckpt::Options::validate);
}

void bindStats(py::module_& module)
{
    py::class_<ckpt::CheckpointStats>(module, "CheckpointStats")
        .def_readonly("iteration", &ckpt::CheckpointStats::iteration)
        .def_readonly("bytes", &ckpt::CheckpointStats::bytes)
        .def_readonly("snapshot_seconds", &ckpt::CheckpointStats::snapshotSeconds)
        .def_readonly("persist_seconds", &ckpt::CheckpointStats::persistSeconds)
        .def_readonly("stall_seconds", &ckpt::CheckpointStats::stallSeconds)
        .def_readonly("staging_seconds", &ckpt::CheckpointStats::stagingSeconds)
        .def_readonly("finished", &ckpt::CheckpointStats::finished)
        .def_readonly("committed", &ckpt::CheckpointStats::committed)
        .def_readonly("error", &ckpt::CheckpointStats::error)
        .def_readonly("final", &ckpt::CheckpointStats::final)
        .def_readonly("training_done", &ckpt::CheckpointStats::trainingDone);
    py::class_<ckpt::Counters>(module, "Counters")
        .def_readonly("requested", &ckpt::Counters::requested)
        .def_readonly("committed", &ckpt::Counters::committed)
        .def_readonly("failed", &ckpt::Counters::failed)
        .def_readonly("dropped_requests", &ckpt::Counters::droppedRequests)
        .def_readonly("staging_allocations", &ckpt::Counters::stagingAllocations);
    py::class_<ckpt::DrainStatus>(module, "DrainStatus")
        .def_readonly("two_level", &ckpt::DrainStatus::twoLevel)
        .def_readonly("shared_iteration", &ckpt::DrainStatus::sharedIteration)
        .def_readonly("pending_iteration", &ckpt::DrainStatus::pendingIteration)
        .def_readonly("drained", &ckpt::DrainStatus::drained)
        .def_readonly("retries", &ckpt::DrainStatus::retries)
        .def_readonly("failed", &ckpt::DrainStatus::failed)
        .def_readonly("skipped", &ckpt::DrainStatus::skipped)
        .def_readonly("last_drain_seconds", &ckpt::DrainStatus::lastDrainSeconds)
        .def_readonly("last_error", &ckpt::DrainStatus::lastError);
}

} // namespace

void bindErrors(py::module_& module)
{
    // Translators run newest first: the base class is registered before its subclasses. The error is
    // set through the C API: py::exception's call operator is deprecated from pybind11 2.12 on, and
    // py::set_error does not exist before it (Debian 12 has 2.10, Debian 13 2.13).
    static py::exception<ckpt::Error> error(module, "Error", PyExc_RuntimeError);
    static py::exception<ckpt::ConfigError> configError(module, "ConfigError", error.ptr());
    static py::exception<ckpt::FormatError> formatError(module, "FormatError", error.ptr());
    py::register_exception_translator([](std::exception_ptr pointer) {
        try {
            if (pointer) {
                std::rethrow_exception(pointer);
            }
        } catch (const ckpt::ConfigError& e) {
            PyErr_SetString(configError.ptr(), e.what());
        } catch (const ckpt::FormatError& e) {
            PyErr_SetString(formatError.ptr(), e.what());
        } catch (const ckpt::Error& e) {
            PyErr_SetString(error.ptr(), e.what());
        }
    });
}

namespace {

using CheckpointerClass = py::class_<PyCheckpointer>;

// Construction and what a checkpoint holds: regions, their layouts, blobs, manifest fields.
void bindContents(CheckpointerClass& checkpointer)
{
    using Self = PyCheckpointer;
    checkpointer
        // Without the GIL: with several ranks the constructor waits for the others (a first collective),
        // which may be threads of this process or need the GIL for a Python coordinator's callback.
        .def(py::init([](ckpt::Options options) {
            py::gil_scoped_release release;
            return std::make_unique<Self>(std::move(options));
        }),
            "options"_a)
        .def("register_region", &Self::registerRegion, "name"_a, "memory"_a,
            "Registers (or re-registers) a numpy array, writable buffer or contiguous tensor, in place.")
        .def("unregister_region", &Self::unregisterRegion, "name"_a)
        .def(
            "set_region_layout",
            [](Self& self, const std::string& name, const std::string& layout, std::uint64_t offset,
                std::uint64_t globalSize) {
                ckpt::RegionLayout chosen;
                if (layout == "replicated")
                    chosen = ckpt::RegionLayout::replicated();
                else if (layout == "sharded")
                    chosen = ckpt::RegionLayout::sharded(offset, globalSize);
                else if (layout != "rank")
                    throw ckpt::Error("unknown region layout '" + layout + "' (rank, replicated, sharded)");
                py::gil_scoped_release release;
                self.impl().setRegionLayout(name, chosen);
            },
            "name"_a, "layout"_a, "offset"_a = 0, "global_size"_a = 0,
            "'rank' (each rank's own bytes), 'replicated' (the same on every rank: written once, split "
            "across the ranks) or 'sharded' (bytes [offset, offset + size) of an array of global_size).")
        .def(
            "set_tensor_piece",
            [](Self& self, const std::string& name, std::vector<std::uint64_t> shape, std::uint64_t elementSize,
                std::vector<std::uint64_t> boxOffset, std::vector<std::uint64_t> boxLength, std::uint64_t first,
                std::uint32_t writers, std::uint32_t writer, std::vector<std::uint64_t> strides, bool written) {
                ckpt::TensorPiece piece;
                piece.shape = std::move(shape);
                piece.elementSize = elementSize;
                piece.boxOffset = std::move(boxOffset);
                piece.boxLength = std::move(boxLength);
                piece.first = first;
                piece.writers = writers;
                piece.writer = writer;
                piece.strides = std::move(strides);
                piece.written = written;
                py::gil_scoped_release release;
                self.impl().setRegionLayout(name, ckpt::RegionLayout::box(std::move(piece)));
            },
            "name"_a, "shape"_a, "element_size"_a, "box_offset"_a, "box_length"_a, "first"_a = 0, "writers"_a = 1,
            "writer"_a = 0, "strides"_a = std::vector<std::uint64_t> {}, "written"_a = true,
            "The region is a piece of a tensor of `shape` shared by the ranks: elements of the box "
            "[box_offset, box_offset + box_length) from `first` in row-major order, or the whole box at "
            "`strides` (elements); of the `writers` ranks that hold the same piece, this one writes part "
            "`writer` (none when `written` is false).")
        .def_property_readonly("rank", [](Self& self) { return self.impl().rank(); })
        .def_property_readonly("world_size", [](Self& self) { return self.impl().worldSize(); })
        .def(
            "set_blob",
            [](Self& self, const std::string& name, const py::bytes& bytes) {
                self.impl().setBlob(name, std::string_view(bytes));
            },
            "name"_a, "data"_a)
        .def("remove_blob", [](Self& self, const std::string& name) { self.impl().removeBlob(name); })
        .def("set_epoch", [](Self& self, std::uint64_t epoch) { self.impl().setEpoch(epoch); })
        .def(
            "set_manifest_field",
            [](Self& self, const std::string& key, py::handle value) {
                self.impl().setManifestField(key, toJson(value));
            },
            "key"_a, "value"_a);
}

} // namespace

void bindCheckpointer(py::module_& module)
{
    bindCoordinators(module);
    bindOptions(module);
    bindStats(module);
    using Self = PyCheckpointer;
    CheckpointerClass checkpointer(module, "Checkpointer",
        "Two-phase checkpointer: snapshot registered memory, persist it in the background, "
        "commit atomically, restore the newest verified checkpoint.");
    bindContents(checkpointer);
    checkpointer
        .def(
            "after_update", [](Self& self, std::uint64_t iteration) { self.impl().afterUpdate(iteration); },
            "iteration"_a, py::call_guard<py::gil_scoped_release>())
        .def(
            "before_update", [](Self& self) { self.impl().beforeUpdate(); },
            py::call_guard<py::gil_scoped_release>())
        .def(
            "prepare_staging", [](Self& self) { self.impl().prepareStaging(); },
            "Allocate the staging pool for the registered tensors in the background.",
            py::call_guard<py::gil_scoped_release>())
        .def(
            "request_checkpoint",
            [](Self& self, std::uint64_t iteration, bool final, bool trainingDone) {
                return self.impl().requestCheckpoint(iteration, { final, trainingDone });
            },
            "iteration"_a, "final"_a = false, "training_done"_a = false,
            py::call_guard<py::gil_scoped_release>(),
            "`final`: the process exits after it; `training_done`: the training is complete (both go into "
            "the manifest).")
        .def("schedule_checkpoint", [](Self& self) { self.impl().scheduleCheckpoint(); })
        .def(
            "checkpoint_now",
            [](Self& self, std::uint64_t iteration, bool final, bool trainingDone) {
                return self.impl().checkpointNow(iteration, { final, trainingDone });
            },
            "iteration"_a, "final"_a = false, "training_done"_a = false,
            py::call_guard<py::gil_scoped_release>())
        .def(
            "wait", [](Self& self) { return self.impl().wait(); }, py::call_guard<py::gil_scoped_release>())
        .def(
            "wait_durable", [](Self& self) { return self.impl().waitDurable(); },
            py::call_guard<py::gil_scoped_release>(),
            "Two levels: waits until the newest checkpoint has committed in the chain directory.")
        .def("drain_status", [](Self& self) { return self.impl().drainStatus(); })
        .def(
            "set_device_snapshot", [](Self& self, bool onDevice) { self.impl().setDeviceSnapshot(onDevice); },
            "on_device"_a, "Snapshot device regions into spare device memory instead of pinned host memory.")
        .def_property_readonly("in_flight", [](Self& self) { return self.impl().inFlight(); })
        .def("restore", &Self::restore)
        .def("last_checkpoint", [](Self& self) { return self.impl().lastCheckpoint(); })
        .def("counters", [](Self& self) { return self.impl().counters(); })
        .def_property_readonly("last_error", [](Self& self) { return self.impl().lastError(); })
        .def_property_readonly("options", [](Self& self) { return self.impl().options(); })
        .def_property_readonly("device_available", [](Self& self) { return self.impl().deviceAvailable(); })
        .def("close", &Self::close, "Waits for an in-flight checkpoint and releases the registered memory.");
}

} // namespace baton::python
