// baton._native.ResumableSampler: the deterministic, sharded, resumable data order of the policy.
#include "bindings.hpp"

#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "baton/ckpt/sampler.hpp"
#include "convert.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace baton::python {

void bindSampler(py::module_& module)
{
    using ckpt::ResumableSampler;
    py::class_<ResumableSampler>(module, "ResumableSampler",
        "Epoch e visits [0, size) in a permutation keyed by (seed, e); rank r of R "
        "takes positions r, r + R, ...; resumes from (epoch, position) in O(1).")
        .def(py::init<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t, bool>(), "size"_a, "seed"_a,
            "ranks"_a = 1, "rank"_a = 0, "drop_last"_a = false)
        .def_static(
            "from_state",
            [](py::handle state) { return ResumableSampler(toJson(state).get<ckpt::SamplerState>()); },
            "state"_a, "A sampler continuing from a state dict (the manifest's `sampler` field).")
        .def("next", &ResumableSampler::next,
            "The next index of this rank (moves on to the next epoch at its end).")
        .def(
            "take",
            [](ResumableSampler& self, std::size_t count) {
                std::vector<std::uint64_t> indices(count);
                for (auto& index : indices) {
                    index = self.next();
                }
                return indices;
            },
            "count"_a, "The next `count` indices.")
        .def("index_at", &ResumableSampler::indexAt, "epoch"_a, "position"_a)
        .def("seek", &ResumableSampler::seek, "epoch"_a, "position"_a,
            "Continue from (epoch, position), the position counted from the epoch's beginning.")
        .def(
            "resume",
            [](ResumableSampler& self, py::handle saved) {
                // One state dict, or a list of the saved ranks' state dicts (checked for lockstep).
                std::vector<ckpt::SamplerState> states;
                if (py::isinstance<py::dict>(saved)) {
                    states.push_back(toJson(saved).get<ckpt::SamplerState>());
                } else {
                    for (py::handle item : saved)
                        states.push_back(toJson(item).get<ckpt::SamplerState>());
                }
                self.resume(states);
            },
            "state"_a,
            "Continue where a saved state (or the list of the saved ranks' states) left off, on this "
            "sampler's world size and rank: with another number of ranks the epoch's remainder is "
            "shared by this world. ValueError for another size, seed or drop_last, or ranks not in "
            "lockstep.")
        .def_property_readonly("samples_per_epoch", &ResumableSampler::samplesPerEpoch)
        .def_property_readonly(
            "samples_in_epoch",
            [](const ResumableSampler& self) { return self.samplesInEpoch(self.epoch()); },
            "This rank's samples in the current epoch (fewer than samples_per_epoch after a reshard).")
        .def_property_readonly("offset", &ResumableSampler::offset)
        .def_property_readonly("epoch", &ResumableSampler::epoch)
        .def_property_readonly("position", &ResumableSampler::position)
        .def_property_readonly("state", [](const ResumableSampler& self) {
            nlohmann::json state = self.state();
            return fromJson(state);
        });
    module.def("permuted_index", &ckpt::permutedIndex, "position"_a, "size"_a, "seed"_a, "epoch"_a);
}

} // namespace baton::python
