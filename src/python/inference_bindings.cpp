// cpudl.InferenceSession: ONNX Runtime's Python call shape (run(output_names, {name: array}) ->
// list of arrays; get_inputs()/get_outputs()) over cpudl::InferenceSession. Inputs are used
// in place when they are C-contiguous arrays of the declared type (else converted once), and the
// outputs are NumPy arrays over the result tensors: no copy either way.
#include <pybind11/stl.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>

#include "cpudl/inference.h"
#include "python/bindings.h"

namespace cpudl::python {
namespace {

// onnxruntime.NodeArg's fields: shape entries are ints, or None for a free dimension.
struct NodeArg {
  std::string name, type;
  py::list shape;
};

const char* onnx_type_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "tensor(float)";
    case DType::bf16:
      return "tensor(bfloat16)";
    case DType::i8:
      return "tensor(int8)";
    case DType::i32:
      return "tensor(int32)";
    case DType::i64:
      return "tensor(int64)";
    case DType::u8:
      return "tensor(uint8)";
  }
  return "tensor(?)";
}

std::vector<NodeArg> node_args(const std::vector<ModelValue>& values) {
  std::vector<NodeArg> args;
  for (const ModelValue& v : values) {
    py::list shape;
    for (const std::int64_t d : v.shape)
      shape.append(d < 0 ? py::object(py::none()) : py::object(py::int_(d)));
    args.push_back({v.name, onnx_type_name(v.dtype), shape});
  }
  return args;
}

std::string name_list(const std::vector<ModelValue>& values) {
  std::string out;
  for (const ModelValue& v : values) out += (out.empty() ? "'" : ", '") + v.name + "'";
  return out;
}

class PySession {
 public:
  PySession(const std::filesystem::path& path, const py::object& threads, bool optimize) {
    InferenceOptions o;
    o.optimize = optimize;
    o.threads = threads.is_none() ? 0 : threads.cast<int>();
    py::gil_scoped_release release;
    session_ = std::make_unique<InferenceSession>(path, o);
  }

  py::list run(const py::object& output_names, const py::dict& feed) {
    const std::vector<ModelValue>& inputs = session_->inputs();
    const std::vector<ModelValue>& outputs = session_->outputs();
    std::vector<Tensor> tensors;
    tensors.reserve(inputs.size());
    for (const ModelValue& in : inputs) {
      const py::str key(in.name);
      if (!feed.contains(key))
        throw py::value_error("InferenceSession.run: missing input '" + in.name +
                              "' (the model's inputs: " + name_list(inputs) + ")");
      tensors.push_back(as_tensor(feed[key], in));
    }
    if (feed.size() > inputs.size())
      for (const auto& [key, value] : feed) {
        const auto name = key.cast<std::string>();
        bool known = false;
        for (const ModelValue& in : inputs) known = known || in.name == name;
        if (!known)
          throw py::value_error("InferenceSession.run: the model has no input '" + name +
                                "' (its inputs: " + name_list(inputs) + ")");
      }
    std::vector<Tensor> results;
    {
      py::gil_scoped_release release;
      // A session's plans and buffers serve one run at a time; threads sharing a session (as
      // ONNX Runtime allows) take turns, threads with their own sessions run at once.
      std::lock_guard lock(mutex_);
      results = session_->run(tensors);
    }
    py::list out;
    if (output_names.is_none()) {
      for (const Tensor& t : results) out.append(tensor_to_numpy(t));
      return out;
    }
    for (const py::handle h : output_names) {
      const auto name = h.cast<std::string>();
      std::size_t i = 0;
      while (i < outputs.size() && outputs[i].name != name) ++i;
      if (i == outputs.size())
        throw py::value_error("InferenceSession.run: the model has no output '" + name +
                              "' (its outputs: " + name_list(outputs) + ")");
      out.append(tensor_to_numpy(results[i]));
    }
    return out;
  }

  // Seconds of each of `runs` calls of the C++ run on these inputs, timed in C++: what
  // bench/vs_python.py subtracts from run()'s time to get the Python call's own cost.
  std::vector<double> time_cpp_runs(const py::dict& feed, int runs) {
    std::vector<Tensor> tensors;
    for (const ModelValue& in : session_->inputs()) tensors.push_back(as_tensor(feed[py::str(in.name)], in));
    std::vector<double> seconds;
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    for (int i = 0; i < runs; ++i) {
      const auto start = std::chrono::steady_clock::now();
      session_->run(tensors);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return seconds;
  }

  std::vector<NodeArg> get_inputs() const { return node_args(session_->inputs()); }
  std::vector<NodeArg> get_outputs() const { return node_args(session_->outputs()); }

 private:
  // The array itself when it can be (C-contiguous, the declared type), else one converted copy.
  static Tensor as_tensor(const py::handle value, const ModelValue& in) {
    if (py::isinstance<Tensor>(value)) return value.cast<Tensor>();
    const py::dtype want(dtype_text(in.dtype));
    py::array array = py::isinstance<py::array>(value)
                          ? py::reinterpret_borrow<py::array>(value)
                          : py::array(py::module_::import("numpy").attr("asarray")(value));
    if (!array.dtype().is(want) || !(array.flags() & py::array::c_style) || !array.writeable()) {
      if (array.dtype().kind() != want.kind() && !(array.dtype().kind() == 'f' && want.kind() == 'f'))
        throw py::value_error("InferenceSession.run: input '" + in.name + "' is " +
                              std::string(py::str(array.dtype())) + "; the model takes " +
                              dtype_text(in.dtype));
      array = py::array(py::module_::import("numpy").attr("ascontiguousarray")(array, want));
      if (!array.writeable()) array = py::array(array.attr("copy")());
    }
    return tensor_from_numpy(array, "InferenceSession.run: input '" + in.name + "'");
  }

  std::unique_ptr<InferenceSession> session_;
  std::mutex mutex_;
};

}  // namespace

void bind_inference(py::module_& m) {
  py::class_<NodeArg>(m, "NodeArg", "A model input or output, as onnxruntime.NodeArg.")
      .def_readonly("name", &NodeArg::name)
      .def_readonly("type", &NodeArg::type)
      .def_readonly("shape", &NodeArg::shape)
      .def("__repr__", [](const NodeArg& a) {
        return "NodeArg(name='" + a.name + "', type='" + a.type +
               "', shape=" + std::string(py::repr(a.shape)) + ")";
      });
  py::class_<PySession>(m, "InferenceSession",
                        "An ONNX model, optimised once and run with ONNX Runtime's call shape.")
      .def(py::init<const std::filesystem::path&, const py::object&, bool>(), py::arg("path"),
           py::arg("threads") = py::none(), py::arg("optimize") = true,
           "Loads and optimises an ONNX file; `threads` is this session's compute threads (None: the "
           "default).")
      .def(
          "run", &PySession::run, py::arg("output_names"), py::arg("input_feed"),
          "Runs the model: output_names (None: all) and {input name: array}; returns a list of NumPy arrays.")
      .def("_time_cpp_runs", &PySession::time_cpp_runs, py::arg("input_feed"), py::arg("runs"))
      .def("get_inputs", &PySession::get_inputs)
      .def("get_outputs", &PySession::get_outputs);
}

}  // namespace cpudl::python
