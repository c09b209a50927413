#include "convert.hpp"

#include <stdexcept>

namespace py = pybind11;

namespace baton::python {

namespace {

Memory tensorMemory(py::handle tensor, const std::string& name)
{
    if (!tensor.attr("is_contiguous")().cast<bool>()) {
        throw py::value_error(name
            + ": the tensor is not contiguous; checkpoint tensor.contiguous() "
              "and keep that tensor in use");
    }
    Memory memory;
    memory.data = reinterpret_cast<void*>(tensor.attr("data_ptr")().cast<std::uintptr_t>());
    memory.size
        = tensor.attr("element_size")().cast<std::size_t>() * tensor.attr("numel")().cast<std::size_t>();
    py::object device = tensor.attr("device");
    std::string type = py::str(device.attr("type"));
    if (type == "cuda") {
        py::object index = device.attr("index");
        memory.device = index.is_none() ? 0 : index.cast<int>();
    } else if (type != "cpu") {
        throw py::value_error(name + ": tensors on " + type + " devices cannot be checkpointed");
    }
    return memory;
}

} // namespace

Memory memoryOf(py::handle object, const std::string& name)
{
    if (PyObject_CheckBuffer(object.ptr())) {
        Py_buffer view;
        if (PyObject_GetBuffer(object.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
            PyErr_Clear();
            throw py::value_error(
                name + ": the buffer is read-only or not C-contiguous; restore must write into it");
        }
        Memory memory { view.buf, static_cast<std::size_t>(view.len), -1 };
        PyBuffer_Release(&view); // the caller keeps `object` alive, which keeps its memory
        return memory;
    }
    if (py::hasattr(object, "data_ptr") && py::hasattr(object, "is_contiguous")) {
        return tensorMemory(object, name);
    }
    throw py::value_error(name + ": expected a writable buffer (numpy array, bytearray) or a tensor, not "
        + std::string(py::str(py::type::of(object).attr("__name__"))));
}

nlohmann::json toJson(py::handle object)
{
    py::module_ json = py::module_::import("json");
    std::string text = json.attr("dumps")(object).cast<std::string>();
    return nlohmann::json::parse(text);
}

py::object fromJson(const nlohmann::json& value)
{
    py::module_ json = py::module_::import("json");
    return json.attr("loads")(value.dump());
}

} // namespace baton::python
