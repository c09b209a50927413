// baton._native.CheckpointReader: one checkpoint read outside a training (baton.dcp's export).
#include "bindings.hpp"

#include <pybind11/stl.h>

#include "baton/ckpt/error.hpp"
#include "baton/ckpt/reader.hpp"
#include "convert.hpp"

namespace py = pybind11;
using namespace pybind11::literals;
namespace ckpt = baton::ckpt;

namespace baton::python {

void bindReader(py::module_& module)
{
    py::class_<ckpt::CheckpointReader>(module, "CheckpointReader",
        "One checkpoint directory read directly: its manifest, every region whole, every blob, verified.")
        .def(py::init([](const std::string& dir) {
            py::gil_scoped_release release;
            return std::make_unique<ckpt::CheckpointReader>(dir);
        }),
            "checkpoint_dir"_a)
        .def_property_readonly("manifest", [](const ckpt::CheckpointReader& self) { return fromJson(self.manifest().document); })
        .def(
            "regions",
            [](const ckpt::CheckpointReader& self) {
                py::list regions;
                for (const auto& region : self.regions())
                    regions.append(py::dict("name"_a = region.name, "bytes"_a = region.bytes, "shape"_a = region.shape,
                        "element_size"_a = region.elementSize));
                return regions;
            },
            "Every region: name, bytes (the whole region), shape (a tensor's global shape, else empty), "
            "element_size (0 where the checkpoint does not say).")
        .def(
            "read_region",
            [](const ckpt::CheckpointReader& self, const std::string& name, py::handle memory, int rank) {
                const Memory target = memoryOf(memory, name);
                if (target.device >= 0)
                    throw ckpt::Error("read_region reads into host memory");
                py::gil_scoped_release release;
                self.readRegion(name, { static_cast<std::byte*>(target.data), target.size }, rank);
            },
            "name"_a, "memory"_a, "rank"_a = 0,
            "Reads the whole region (every rank's pieces) into `memory`, a writable buffer or contiguous CPU "
            "tensor of exactly its bytes.")
        .def(
            "read_blob",
            [](const ckpt::CheckpointReader& self, const std::string& name, int rank) {
                std::vector<std::byte> bytes;
                {
                    py::gil_scoped_release release;
                    bytes = self.readBlob(name, rank);
                }
                return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
            },
            "name"_a, "rank"_a = 0);
}

} // namespace baton::python
