// The parts of the `baton._native` module, each bound in its own file.
#pragma once

#include <pybind11/pybind11.h>

namespace baton::python {

void bindErrors(pybind11::module_& module);
void bindCheckpointer(pybind11::module_& module);
void bindReader(pybind11::module_& module);
void bindSampler(pybind11::module_& module);
void bindPolicy(pybind11::module_& module);
void bindSession(pybind11::module_& module);

} // namespace baton::python
