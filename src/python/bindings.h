// cpudl's Python module (_cpudl, wrapped by the package in python/cpudl): one bind_* function per
// area, and what they share. The bindings release the GIL around every call that computes, so a
// Python thread pool can run several sessions at once.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl/filesystem.h>

#include <memory>
#include <string>
#include <string_view>

#include "cpudl/tensor.h"

namespace cpudl::python {

namespace py = pybind11;
using ReleaseGil = py::call_guard<py::gil_scoped_release>;

void bind_tensor(py::module_& m);
void bind_ops(py::module_& m);
void bind_nn(py::module_& m);
void bind_inference(py::module_& m);
void bind_llm(py::module_& m);
void bind_runtime(py::module_& m);

// Keeps a Python object (a NumPy array, a DLPack capsule's producer) alive for as long as a
// Storage borrows its memory; the reference is dropped with the GIL taken, since the last tensor
// can die on a thread that released it.
std::shared_ptr<void> python_owner(py::object object);

// NumPy's name of a dtype ("float32", "int64", ...; "bfloat16", which NumPy lacks): Tensor.dtype.
std::string dtype_text(DType dtype);

// Text from bytes that need not be valid UTF-8 (a token can end inside a character).
py::str utf8_text(std::string_view bytes);

// A tensor as a NumPy array that shares its memory (no copy); the array keeps the tensor alive.
py::array tensor_to_numpy(const Tensor& t);
// A C-contiguous, writable array of a supported dtype as a tensor over its memory; ValueError
// naming what to pass otherwise. `what` starts the message ("from_numpy", "input 'x'").
Tensor tensor_from_numpy(const py::array& array, const std::string& what);

}  // namespace cpudl::python
