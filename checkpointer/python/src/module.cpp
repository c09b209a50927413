// baton._native: the Python binding of libbaton-ckpt. The pure-Python package `baton` re-exports it and
// adds `baton.torch`.
#include "bindings.hpp"

#include "baton_version.h"

PYBIND11_MODULE(_native, module)
{
    module.doc() = "baton's checkpointer: regions, blobs, hooks, restore, policy and resumable sampler";
    module.attr("__version__") = BATON_VERSION;
    module.attr("have_cuda") = static_cast<bool>(BATON_HAVE_CUDA);
    baton::python::bindErrors(module);
    baton::python::bindCheckpointer(module);
    baton::python::bindReader(module);
    baton::python::bindSampler(module);
    baton::python::bindPolicy(module);
    baton::python::bindSession(module);
}
