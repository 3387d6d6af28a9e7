// The _cpudl extension module: every area's bindings, the machine (doctor, threads), and how
// C++ errors reach Python: UsageError as ValueError, a file that cannot be opened because it does
// not exist as FileNotFoundError, any other cpudl::Error as RuntimeError, each with the CLI's
// one-line message.
#include <cstring>
#include <nlohmann/json.hpp>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "measure/doctor_report.h"
#include "python/bindings.h"

namespace cpudl::python {

void bind_runtime(py::module_& m) {
  m.def("set_threads", &set_default_threads, py::arg("threads"),
        "Compute threads for work started from now on (each InferenceSession or llm.Model may set its own).");
  m.def("get_threads", &compute_threads, "The compute threads this thread's work runs on.");
  m.def("_doctor_json", [] { return doctor_json(runtime(), std::nullopt).dump(); });
}

}  // namespace cpudl::python

PYBIND11_MODULE(_cpudl, m) {
  namespace py = pybind11;
  using namespace cpudl::python;
  m.doc() = "cpudl's engine (C++); import the cpudl package rather than this module.";
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const cpudl::UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const cpudl::Error& e) {
      const bool missing = std::strstr(e.what(), "(No such file or directory)") != nullptr;
      PyErr_SetString(missing ? PyExc_FileNotFoundError : PyExc_RuntimeError, e.what());
    }
  });
  bind_runtime(m);
  bind_tensor(m);
  bind_ops(m);
  bind_nn(m);
  bind_inference(m);
  bind_llm(m);
}
