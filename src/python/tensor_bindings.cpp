// cpudl.Tensor in Python: zero-copy exchange with NumPy (from_numpy, .numpy()) and DLPack
// (__dlpack__, from_dlpack: PyTorch, NumPy), views and indexing, autograd.
#include <dlpack/dlpack.h>
#include <pybind11/stl.h>

#include <cstring>
#include <vector>

#include "cpudl/autograd.h"
#include "cpudl/ops.h"
#include "python/bindings.h"

namespace cpudl::python {
namespace {

py::dtype numpy_dtype(DType dtype, const char* what) {
  if (dtype == DType::bf16)
    throw py::value_error(std::string(what) + ": a bfloat16 tensor has no NumPy dtype");
  return py::dtype(dtype_text(dtype));
}

std::optional<DType> dtype_from_numpy(const py::dtype& d) {
  if (d.byteorder() == '>') return std::nullopt;
  switch (d.kind()) {
    case 'f':
      return d.itemsize() == 4 ? std::optional(DType::f32) : std::nullopt;
    case 'i':
      if (d.itemsize() == 8) return DType::i64;
      if (d.itemsize() == 4) return DType::i32;
      if (d.itemsize() == 1) return DType::i8;
      return std::nullopt;
    case 'u':
      return d.itemsize() == 1 ? std::optional(DType::u8) : std::nullopt;
    default:
      return std::nullopt;
  }
}

// ---- DLPack (dlpack.h 0.6, what PyTorch 1.13 and NumPy 1.24 speak)

DLDataType dl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::i8:
      return {kDLInt, 8, 1};
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
    case DType::u8:
      return {kDLUInt, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

std::optional<DType> dtype_from_dl(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  for (DType d : {DType::f32, DType::bf16, DType::i8, DType::i32, DType::i64, DType::u8}) {
    const DLDataType e = dl_type(d);
    if (e.code == t.code && e.bits == t.bits) return d;
  }
  return std::nullopt;
}

struct DlpackExport {
  Tensor tensor;
  std::vector<std::int64_t> shape, strides;
  DLManagedTensor managed{};
};

py::capsule to_dlpack(const Tensor& t) {
  auto* e = new DlpackExport{t, t.shape(), t.strides(), {}};
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.raw_data();
  d.device = {kDLCPU, 0};
  d.ndim = static_cast<std::int32_t>(e->shape.size());
  d.dtype = dl_type(t.dtype());
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<DlpackExport*>(m->manager_ctx); };
  // A capsule nobody consumed still owns the tensor; a consumer renames it "used_dltensor".
  PyObject* capsule = PyCapsule_New(&e->managed, "dltensor", [](PyObject* c) {
    if (!PyCapsule_IsValid(c, "dltensor")) return;
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    m->deleter(m);
  });
  if (!capsule) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

Tensor from_dlpack(const py::object& source) {
  py::object capsule = py::hasattr(source, "__dlpack__") ? source.attr("__dlpack__")() : source;
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw py::type_error(
        "from_dlpack: expected an object with __dlpack__ (a PyTorch tensor, a NumPy array) "
        "or an unused DLPack capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");  // from here on, the tensor is ours to release
  std::shared_ptr<void> owner(m, [](void* p) {
    auto* managed = static_cast<DLManagedTensor*>(p);
    if (!managed->deleter || !Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;  // producers such as NumPy drop Python references
    managed->deleter(managed);
  });
  const DLTensor& d = m->dl_tensor;
  if (d.device.device_type != kDLCPU && d.device.device_type != kDLCUDAHost)
    throw py::value_error("from_dlpack: the tensor is on device type " +
                          std::to_string(d.device.device_type) + "; cpudl takes CPU memory (kDLCPU)");
  const std::optional<DType> dtype = dtype_from_dl(d.dtype);
  if (!dtype)
    throw py::value_error("from_dlpack: unsupported element type (code " + std::to_string(d.dtype.code) +
                          ", " + std::to_string(d.dtype.bits) + " bits, " + std::to_string(d.dtype.lanes) +
                          " lanes); cpudl takes float32, bfloat16, int8, int32, int64 and uint8");
  Shape shape(d.shape, d.shape + d.ndim), strides;
  if (d.strides) strides.assign(d.strides, d.strides + d.ndim);
  std::int64_t extent = 1;  // elements from the first one the view reaches to one past the last
  for (int i = 0; i < d.ndim; ++i) {
    const std::int64_t stride = d.strides ? d.strides[i] : 1;
    if (stride < 0)
      throw py::value_error("from_dlpack: negative strides are not supported (copy the tensor first)");
    if (shape[static_cast<std::size_t>(i)] == 0) extent = 0;
  }
  if (extent != 0) {
    if (d.strides) {
      for (int i = 0; i < d.ndim; ++i) extent += (shape[static_cast<std::size_t>(i)] - 1) * d.strides[i];
    } else {
      extent = shape_numel(shape);
    }
  }
  auto storage =
      std::make_shared<Storage>(static_cast<char*>(d.data) + d.byte_offset,
                                static_cast<std::size_t>(extent) * dtype_size(*dtype), std::move(owner));
  return Tensor::from_storage(std::move(storage), shape, *dtype, strides);
}

// ---- indexing: integers, slices with positive steps, None and one Ellipsis, as NumPy basic indexing

Tensor index(const Tensor& t, const py::object& key) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(key)) {
    for (const py::handle item : key.cast<py::tuple>())
      items.push_back(py::reinterpret_borrow<py::object>(item));
  } else {
    items.push_back(key);
  }
  std::int64_t consuming = 0;  // items that take a dimension
  for (const py::object& item : items)
    if (!item.is_none() && !item.is(py::ellipsis())) ++consuming;
  if (consuming > t.dim())
    throw py::index_error("too many indices for a tensor of " + std::to_string(t.dim()) + " dimensions");
  Tensor r = t;
  std::int64_t dim = 0;
  for (const py::object& item : items) {
    if (item.is_none()) {
      r = r.unsqueeze(dim++);
    } else if (item.is(py::ellipsis())) {
      dim += t.dim() - consuming;
    } else if (py::isinstance<py::slice>(item)) {
      py::ssize_t start = 0, stop = 0, step = 0, length = 0;
      if (!item.cast<py::slice>().compute(static_cast<py::ssize_t>(r.size(dim)), &start, &stop, &step,
                                          &length))
        throw py::error_already_set();
      if (step < 1)
        throw py::value_error("tensor indexing: slices need a positive step (got " + std::to_string(step) +
                              ")");
      r = r.slice(dim++, start, length == 0 ? start : start + (length - 1) * step + 1, step);
    } else if (py::isinstance<py::int_>(item) && !py::isinstance<py::bool_>(item)) {
      const std::int64_t size = r.size(dim);
      std::int64_t i = item.cast<std::int64_t>();
      if (i < -size || i >= size)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " +
                              std::to_string(dim) + " with size " + std::to_string(size));
      if (i < 0) i += size;
      r = r.slice(dim, i, i + 1).squeeze(dim);
    } else {
      throw py::type_error("tensor indices are integers, slices, None or ...; got " +
                           std::string(py::str(py::type::of(item).attr("__name__"))));
    }
  }
  return r;
}

Shape shape_argument(const py::args& args, const char* what) {
  // reshape(2, 3) and reshape((2, 3)) alike, as PyTorch
  if (args.size() == 1 && (py::isinstance<py::tuple>(args[0]) || py::isinstance<py::list>(args[0])))
    return args[0].cast<Shape>();
  Shape shape;
  for (const py::handle a : args) {
    if (!py::isinstance<py::int_>(a)) throw py::type_error(std::string(what) + ": sizes are integers");
    shape.push_back(a.cast<std::int64_t>());
  }
  return shape;
}

}  // namespace

std::string dtype_text(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::i8:
      return "int8";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
  }
  return "?";
}

std::shared_ptr<void> python_owner(py::object object) {
  return std::shared_ptr<void>(object.release().ptr(), [](void* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(p));
  });
}

py::str utf8_text(std::string_view bytes) {
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

py::array tensor_to_numpy(const Tensor& t) {
  const py::dtype dtype = numpy_dtype(t.dtype(), "numpy");
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (const std::int64_t s : t.strides())
    strides.push_back(static_cast<py::ssize_t>(s * static_cast<std::int64_t>(dtype_size(t.dtype()))));
  py::capsule keep(new Tensor(t), [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dtype, shape, strides, t.raw_data(), keep);
}

Tensor tensor_from_numpy(const py::array& array, const std::string& what) {
  const std::optional<DType> dtype = dtype_from_numpy(array.dtype());
  if (!dtype)
    throw py::value_error(what + ": dtype " + std::string(py::str(array.dtype())) +
                          " is not supported (float32, int64, int32, int8 or uint8); convert with "
                          ".astype(numpy.float32), or use cpudl.tensor(a), which copies and converts");
  if (!(array.flags() & py::array::c_style))
    throw py::value_error(what +
                          ": the array is not C-contiguous; pass numpy.ascontiguousarray(a), or use "
                          "cpudl.tensor(a), which copies");
  if (!array.writeable())
    throw py::value_error(what +
                          ": the array is read-only, and a tensor that shares its memory could write to "
                          "it; pass a.copy(), or use cpudl.tensor(a), which copies");
  Shape shape(array.shape(), array.shape() + array.ndim());
  void* data = const_cast<void*>(array.data());
  auto storage =
      std::make_shared<Storage>(data, static_cast<std::size_t>(array.nbytes()), python_owner(array));
  return Tensor::from_storage(std::move(storage), shape, *dtype);
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", "An n-dimensional array with autograd (cpudl::Tensor); views share memory.")
      .def_property_readonly(
          "shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); },
          "The sizes of each dimension, as a tuple.")
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return dtype_text(t.dtype()); },
          "The element type: 'float32', 'bfloat16', 'int8', 'int32', 'int64' or 'uint8'.")
      .def_property_readonly("ndim", &Tensor::dim, "The number of dimensions.")
      .def("dim", &Tensor::dim, "The number of dimensions.")
      .def("numel", &Tensor::numel, "The number of elements.")
      .def(
          "size",
          [](const Tensor& t, const py::object& dim) -> py::object {
            if (dim.is_none()) return py::tuple(py::cast(t.shape()));
            return py::int_(t.size(dim.cast<std::int64_t>()));
          },
          py::arg("dim") = py::none(), "The shape, or the size of one dimension.")
      .def(
          "stride", [](const Tensor& t) { return py::tuple(py::cast(t.strides())); }, "Strides in elements.")
      .def("is_contiguous", &Tensor::is_contiguous,
           "Whether the elements lie in row-major order without gaps.")
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("numpy", &tensor_to_numpy, "A NumPy array that shares this tensor's memory (no copy).")
      .def(
          "__array__",
          [](const Tensor& t, const py::object& dtype) -> py::object {
            py::array a = tensor_to_numpy(t);
            return dtype.is_none() ? py::object(a) : py::object(a.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none())
      .def(
          "__dlpack__", [](const Tensor& t, const py::object&) { return to_dlpack(t); },
          py::arg("stream") = py::none(), "A DLPack capsule sharing this tensor's memory.")
      .def("__dlpack_device__", [](const Tensor&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); })
      .def(
          "item",
          [](const Tensor& t) -> py::object {
            if (t.numel() != 1)
              throw py::value_error("item(): the tensor has " + std::to_string(t.numel()) +
                                    " elements, not one");
            if (t.dtype() == DType::f32) return py::float_(t.item());
            return tensor_to_numpy(t).attr("item")();
          },
          "The value of a one-element tensor as a Python number.")
      .def("tolist", [](const Tensor& t) { return tensor_to_numpy(t).attr("tolist")(); })
      .def("__getitem__", &index)
      .def("view", [](const Tensor& t, const py::args& a) { return t.view(shape_argument(a, "view")); })
      .def("reshape",
           [](const Tensor& t, const py::args& a) { return t.reshape(shape_argument(a, "reshape")); })
      .def("permute",
           [](const Tensor& t, const py::args& a) { return t.permute(shape_argument(a, "permute")); })
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def_property_readonly(
          "T",
          [](const Tensor& t) {
            if (t.dim() != 2)
              throw py::value_error(".T: the tensor has " + std::to_string(t.dim()) + " dimensions, not 2");
            return t.transpose(0, 1);
          })
      .def("expand", [](const Tensor& t, const py::args& a) { return t.expand(shape_argument(a, "expand")); })
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("squeeze", &Tensor::squeeze, py::arg("dim"))
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("contiguous", &Tensor::contiguous, ReleaseGil())
      .def("clone", &Tensor::clone, ReleaseGil())
      .def("detach", &Tensor::detach, "The same memory, cut from the autograd graph.")
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool on) { t.set_requires_grad(on); })
      .def(
          "requires_grad_", [](Tensor& t, bool on) { return t.set_requires_grad(on); },
          py::arg("requires_grad") = true)
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = t.grad();
            return g.defined() ? py::cast(g) : py::none();
          },
          [](const Tensor& t, const py::object& g) {
            if (g.is_none())
              t.zero_grad();
            else
              t.set_grad(g.cast<Tensor>());
          },
          "The gradient a backward pass accumulated (None before one reached this tensor).")
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly(
          "grad_fn",
          [](const Tensor& t) -> py::object {
            auto node = t.grad_fn();
            return node ? py::object(py::str(node->name())) : py::none();
          },
          "The name of the operation that made this tensor (None for leaves).")
      .def(
          "backward",
          [](const Tensor& t, const py::object& gradient, bool retain_graph) {
            const Tensor g = gradient.is_none() ? Tensor() : gradient.cast<Tensor>();
            py::gil_scoped_release release;
            t.backward(g, retain_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false,
          "Backpropagates from this tensor (a one-element loss, or with `gradient`).")
      .def("__repr__", [](const Tensor& t) { return "cpudl." + t.to_string(); })
      .def("_version", &Tensor::version)
      .def("_bump_version", &Tensor::bump_version)
      .def("_data_ptr", [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.raw_data()); });

  m.def(
      "from_numpy", [](const py::array& a) { return tensor_from_numpy(a, "from_numpy"); }, py::arg("array"),
      "A tensor that shares a C-contiguous, writable NumPy array's memory (float32, int64, int32, int8, "
      "uint8).");
  m.def("_from_buffer_copy", [](const py::array& a) {
    const Tensor view = tensor_from_numpy(a, "tensor");
    py::gil_scoped_release release;
    return view.clone();  // owned, 64-byte-aligned memory
  });
  m.def("from_dlpack", &from_dlpack, py::arg("tensor"),
        "A tensor that shares the memory of any DLPack producer (torch.Tensor, numpy.ndarray), without a "
        "copy.");

  py::class_<NoGradGuard>(m, "_NoGradGuard").def(py::init<>());
  m.def("is_grad_enabled", &grad_mode_enabled,
        "Whether operations record the autograd graph on this thread.");
  m.def("manual_seed", &manual_seed, py::arg("seed"), "Seeds the default random generator.");
}

}  // namespace cpudl::python
