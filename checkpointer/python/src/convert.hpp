// Conversions between Python objects and the C++ types of the checkpointer API.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

namespace baton::python {

// A contiguous block of memory owned by a Python object.
struct Memory {
    void* data = nullptr;
    std::size_t size = 0;
    int device = -1; // CUDA device, -1 = host memory
};

// The memory of `object`: a writable, C-contiguous buffer (numpy arrays, bytearray, memoryview), or a
// tensor exposing data_ptr(), element_size(), numel(), is_contiguous() and device (torch). Throws
// ValueError for anything else, a read-only buffer or a non-contiguous tensor.
Memory memoryOf(pybind11::handle object, const std::string& name);

// JSON-compatible Python values (dict, list, tuple, str, int, float, bool, None) to and from nlohmann.
nlohmann::json toJson(pybind11::handle object);
pybind11::object fromJson(const nlohmann::json& json);

} // namespace baton::python
