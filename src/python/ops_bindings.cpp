// The differentiable operations (cpudl/ops.h) in Python: torch.* and torch.nn.functional's names
// and keyword arguments, tensor methods and operators. Every call releases the GIL.
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include "cpudl/ops.h"
#include "python/bindings.h"

namespace cpudl::python {
namespace {

std::vector<std::int64_t> dims_of(const py::object& dim) {
  if (dim.is_none()) return {};
  if (py::isinstance<py::int_>(dim)) return {dim.cast<std::int64_t>()};
  return dim.cast<std::vector<std::int64_t>>();
}

Tensor reduce_sum(const Tensor& x, const py::object& dim, bool keepdim) {
  std::vector<std::int64_t> dims = dims_of(dim);
  py::gil_scoped_release release;
  return sum(x, dims, keepdim);
}

Tensor reduce_mean(const Tensor& x, const py::object& dim, bool keepdim) {
  std::vector<std::int64_t> dims = dims_of(dim);
  py::gil_scoped_release release;
  return mean(x, dims, keepdim);
}

// (h, w) pairs or one int, as PyTorch's _pair.
std::pair<std::int64_t, std::int64_t> pair_of(const py::object& v, const char* what) {
  if (py::isinstance<py::int_>(v)) return {v.cast<std::int64_t>(), v.cast<std::int64_t>()};
  auto p = v.cast<std::vector<std::int64_t>>();
  if (p.size() != 2) throw py::value_error(std::string(what) + ": expected an int or a pair of ints");
  return {p[0], p[1]};
}

Conv2dOptions conv_options(const py::object& stride, const py::object& padding, const py::object& dilation,
                           std::int64_t groups) {
  Conv2dOptions o;
  std::tie(o.stride_h, o.stride_w) = pair_of(stride, "conv2d: stride");
  std::tie(o.pad_h, o.pad_w) = pair_of(padding, "conv2d: padding");
  std::tie(o.dilation_h, o.dilation_w) = pair_of(dilation, "conv2d: dilation");
  o.groups = groups;
  return o;
}

Tensor optional_tensor(const py::object& t) { return t.is_none() ? Tensor() : t.cast<Tensor>(); }

}  // namespace

void bind_ops(py::module_& m) {
  auto tensor = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  using T = const Tensor&;
  // Operators: a tensor or a Python number on either side, broadcasting as NumPy.
  tensor
      .def(
          "__add__", [](T a, T b) { return add(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__add__", [](T a, float b) { return add(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__radd__", [](T a, float b) { return add(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__sub__", [](T a, T b) { return sub(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__sub__", [](T a, float b) { return add(a, -b); }, py::is_operator(), ReleaseGil())
      .def(
          "__rsub__", [](T a, float b) { return add(neg(a), b); }, py::is_operator(), ReleaseGil())
      .def(
          "__mul__", [](T a, T b) { return mul(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__mul__", [](T a, float b) { return mul(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__rmul__", [](T a, float b) { return mul(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__truediv__", [](T a, T b) { return div(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "__truediv__", [](T a, float b) { return mul(a, 1.0f / b); }, py::is_operator(), ReleaseGil())
      .def(
          "__rtruediv__", [](T a, float b) { return mul(pow(a, -1.0f), b); }, py::is_operator(), ReleaseGil())
      .def(
          "__neg__", [](T a) { return neg(a); }, ReleaseGil())
      .def(
          "__pow__", [](T a, float e) { return pow(a, e); }, py::is_operator(), ReleaseGil())
      .def(
          "__matmul__", [](T a, T b) { return matmul(a, b); }, py::is_operator(), ReleaseGil())
      .def(
          "add", [](T a, T b) { return add(a, b); }, ReleaseGil())
      .def(
          "mul", [](T a, T b) { return mul(a, b); }, ReleaseGil())
      .def(
          "matmul", [](T a, T b) { return matmul(a, b); }, ReleaseGil())
      .def(
          "relu", [](T a) { return relu(a); }, ReleaseGil())
      .def(
          "exp", [](T a) { return exp(a); }, ReleaseGil())
      .def(
          "log", [](T a) { return log(a); }, ReleaseGil())
      .def(
          "sqrt", [](T a) { return sqrt(a); }, ReleaseGil())
      .def(
          "sigmoid", [](T a) { return sigmoid(a); }, ReleaseGil())
      .def(
          "tanh", [](T a) { return tanh(a); }, ReleaseGil())
      .def(
          "softmax", [](T a, std::int64_t dim) { return softmax(a, dim); }, py::arg("dim"), ReleaseGil())
      .def(
          "log_softmax", [](T a, std::int64_t dim) { return log_softmax(a, dim); }, py::arg("dim"),
          ReleaseGil())
      .def("sum", &reduce_sum, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("mean", &reduce_mean, py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "max", [](T a, std::int64_t dim, bool keepdim) { return max(a, dim, keepdim); }, py::arg("dim"),
          py::arg("keepdim") = false, ReleaseGil())
      .def(
          "argmax", [](T a, std::int64_t dim, bool keepdim) { return argmax(a, dim, keepdim); },
          py::arg("dim"), py::arg("keepdim") = false, ReleaseGil());

  m.def(
      "add", [](T a, T b) { return add(a, b); }, py::arg("input"), py::arg("other"), ReleaseGil());
  m.def(
      "sub", [](T a, T b) { return sub(a, b); }, py::arg("input"), py::arg("other"), ReleaseGil());
  m.def(
      "mul", [](T a, T b) { return mul(a, b); }, py::arg("input"), py::arg("other"), ReleaseGil());
  m.def(
      "div", [](T a, T b) { return div(a, b); }, py::arg("input"), py::arg("other"), ReleaseGil());
  m.def(
      "matmul", [](T a, T b) { return matmul(a, b); }, py::arg("input"), py::arg("other"), ReleaseGil(),
      "Matrix product with batching, as torch.matmul.");
  m.def(
      "exp", [](T x) { return exp(x); }, ReleaseGil());
  m.def(
      "log", [](T x) { return log(x); }, ReleaseGil());
  m.def(
      "sqrt", [](T x) { return sqrt(x); }, ReleaseGil());
  m.def(
      "pow", [](T x, float e) { return pow(x, e); }, py::arg("input"), py::arg("exponent"), ReleaseGil());
  m.def(
      "clamp", [](T x, std::optional<float> lo, std::optional<float> hi) { return clamp(x, lo, hi); },
      py::arg("input"), py::arg("min") = py::none(), py::arg("max") = py::none(), ReleaseGil());
  m.def(
      "relu", [](T x) { return relu(x); }, ReleaseGil());
  m.def(
      "leaky_relu", [](T x, float s) { return leaky_relu(x, s); }, py::arg("input"),
      py::arg("negative_slope") = 0.01f, ReleaseGil());
  m.def(
      "gelu", [](T x) { return gelu(x); }, ReleaseGil());
  m.def(
      "sigmoid", [](T x) { return sigmoid(x); }, ReleaseGil());
  m.def(
      "tanh", [](T x) { return tanh(x); }, ReleaseGil());
  m.def("sum", &reduce_sum, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("mean", &reduce_mean, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def(
      "argmax", [](T x, std::int64_t dim, bool keepdim) { return argmax(x, dim, keepdim); }, py::arg("input"),
      py::arg("dim"), py::arg("keepdim") = false, ReleaseGil());
  m.def(
      "cat", [](const std::vector<Tensor>& ts, std::int64_t dim) { return concat(ts, dim); },
      py::arg("tensors"), py::arg("dim") = 0, ReleaseGil());
  m.def(
      "softmax", [](T x, std::int64_t dim) { return softmax(x, dim); }, py::arg("input"), py::arg("dim"),
      ReleaseGil());
  m.def(
      "log_softmax", [](T x, std::int64_t dim) { return log_softmax(x, dim); }, py::arg("input"),
      py::arg("dim"), ReleaseGil());
  m.def(
      "linear",
      [](T x, T w, const py::object& b) {
        const Tensor bias = optional_tensor(b);
        py::gil_scoped_release release;
        return linear(x, w, bias);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(),
      "y = x W^T + b, as torch.nn.functional.linear.");
  m.def(
      "conv2d",
      [](T x, T w, const py::object& b, const py::object& stride, const py::object& padding,
         const py::object& dilation, std::int64_t groups) {
        const Tensor bias = optional_tensor(b);
        const Conv2dOptions o = conv_options(stride, padding, dilation, groups);
        py::gil_scoped_release release;
        return conv2d(x, w, bias, o);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1,
      "2-D convolution of NCHW input with OIHW weights, as torch.nn.functional.conv2d.");
  m.def(
      "max_pool2d",
      [](T x, std::int64_t k, const py::object& stride, std::int64_t padding) {
        const std::int64_t s = stride.is_none() ? 0 : stride.cast<std::int64_t>();
        py::gil_scoped_release release;
        return max_pool2d(x, k, s, padding);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  m.def(
      "avg_pool2d",
      [](T x, std::int64_t k, const py::object& stride, std::int64_t padding) {
        const std::int64_t s = stride.is_none() ? 0 : stride.cast<std::int64_t>();
        py::gil_scoped_release release;
        return avg_pool2d(x, k, s, padding);
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  m.def(
      "adaptive_avg_pool2d",
      [](T x, const py::object& size) {
        const auto [h, w] = pair_of(size, "adaptive_avg_pool2d: output_size");
        py::gil_scoped_release release;
        return adaptive_avg_pool2d(x, h, w);
      },
      py::arg("input"), py::arg("output_size"));
  m.def(
      "batch_norm",
      [](T x, T mean, T var, const py::object& w, const py::object& b, bool training, float momentum,
         float eps) {
        const Tensor weight = optional_tensor(w), bias = optional_tensor(b);
        py::gil_scoped_release release;
        return batch_norm2d(x, mean, var, weight, bias, training, momentum, eps);
      },
      py::arg("input"), py::arg("running_mean"), py::arg("running_var"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("training") = false, py::arg("momentum") = 0.1f,
      py::arg("eps") = 1e-5f);
  m.def(
      "dropout", [](T x, float p, bool training) { return dropout(x, p, training); }, py::arg("input"),
      py::arg("p") = 0.5f, py::arg("training") = true, ReleaseGil());
  m.def(
      "embedding", [](T i, T w) { return embedding(i, w); }, py::arg("input"), py::arg("weight"),
      ReleaseGil());
  m.def(
      "cross_entropy",
      [](T logits, T target, float smoothing) { return cross_entropy(logits, target, smoothing); },
      py::arg("input"), py::arg("target"), py::arg("label_smoothing") = 0.0f, ReleaseGil(),
      "Mean cross-entropy of logits [N, C] against class indices [N], as torch.nn.functional.cross_entropy.");
  m.def(
      "nll_loss", [](T lp, T target) { return nll_loss(lp, target); }, py::arg("input"), py::arg("target"),
      ReleaseGil());
  m.def(
      "mse_loss", [](T a, T b) { return mse_loss(a, b); }, py::arg("input"), py::arg("target"), ReleaseGil());
  m.def(
      "binary_cross_entropy_with_logits", [](T a, T b) { return binary_cross_entropy_with_logits(a, b); },
      py::arg("input"), py::arg("target"), ReleaseGil());

  m.def(
      "zeros", [](const Shape& s) { return Tensor::zeros(s); }, py::arg("shape"));
  m.def(
      "ones", [](const Shape& s) { return Tensor::ones(s); }, py::arg("shape"));
  m.def(
      "full", [](const Shape& s, float v) { return Tensor::full(s, v); }, py::arg("shape"),
      py::arg("fill_value"));
  m.def(
      "empty", [](const Shape& s) { return Tensor::empty(s); }, py::arg("shape"));
  m.def(
      "rand", [](const Shape& s) { return Tensor::rand(s); }, py::arg("shape"));
  m.def(
      "randn", [](const Shape& s) { return Tensor::randn(s); }, py::arg("shape"));
  m.def(
      "arange", [](float start, float end, float step) { return Tensor::arange(start, end, step); },
      py::arg("start"), py::arg("end"), py::arg("step") = 1.0f);
}

}  // namespace cpudl::python
