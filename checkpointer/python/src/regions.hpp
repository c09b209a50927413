// What the Checkpointer and Session bindings share: registering Python objects as regions and turning
// a restore's result into Python values.
#pragma once

#include <string>

#include <pybind11/pybind11.h>

#include "baton/ckpt/checkpointer.hpp"

namespace baton::python {

// Registers the memory of `object` (see memoryOf) as region `name`: host memory, or a CUDA tensor as a
// device region ordered on its device's current torch stream. The caller keeps `object` alive.
void registerObject(ckpt::Checkpointer& checkpointer, const std::string& name, pybind11::handle object);

// A SimpleNamespace with restored, iteration, epoch, dir, blobs (dict of bytes), manifest (dict),
// fallbacks (list of (dir, reason)) and unclaimed_regions.
pybind11::object restoreResultToPython(const ckpt::RestoreResult& result);

} // namespace baton::python
