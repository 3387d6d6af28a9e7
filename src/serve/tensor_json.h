// The KServe v2 / Open Inference Protocol's JSON tensors: a request's `inputs` parsed and checked
// against the model's inputs, and outputs written back in the same form, as plain values (the
// server makes the tensors). Requests come from the network: every malformed field is a
// RequestError naming it (HTTP 400), never a crash; the parser has a libFuzzer target
// (fuzz/serve_request_fuzz.cpp), which links this file with only the shape helpers of
// tensor/storage.cpp.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cstdint>
#include <new>

#include "cpudl/tensor.h"

namespace cpudl::serve {

// An HTTP error status and a one-line message for the client.
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// What a model declares about one input or output: -1 for a free dimension (the batch).
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

// "FP32", "INT64", ...: the protocol's datatype names.
const char* datatype_name(DType dtype);

// Tensors' storage is aligned to 64 bytes (a cache line, the widest vector load): a tensor may
// borrow a request's values where they lie only on such a boundary.
inline constexpr std::size_t kTensorAlignment = 64;

// Memory on that boundary, for values parsed from JSON that a tensor then takes over.
template <class T>
struct TensorAlignedAllocator {
  using value_type = T;
  TensorAlignedAllocator() = default;
  template <class U>
  TensorAlignedAllocator(const TensorAlignedAllocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kTensorAlignment}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{kTensorAlignment}); }
  bool operator==(const TensorAlignedAllocator&) const { return true; }
};
template <class T>
using TensorVector = std::vector<T, TensorAlignedAllocator<T>>;

// One tensor's values, row-major: f32 for FP32, i64 for INT64; or, for an input sent as binary
// data, `raw`: its little-endian bytes where they lie in the request's body (valid while the body
// is). Either way the server's tensor can borrow them rather than copy.
struct TensorValues {
  DType dtype = DType::f32;
  Shape shape;
  TensorVector<float> f32;
  TensorVector<std::int64_t> i64;
  std::string_view raw;

  std::size_t elements() const {
    return raw.empty() ? f32.size() + i64.size() : raw.size() / dtype_size(dtype);
  }
};

// A parsed infer request: its tensors in the model's input order, and whether the client asked
// for the outputs as binary data (request `parameters.binary_data_output`, or an output's
// `parameters.binary_data`).
struct InferRequest {
  std::vector<TensorValues> inputs;
  bool binary_outputs = false;
};

// The tensors of `{"inputs": [{"name", "shape", "datatype", "data"}, ...]}` in the model's input
// order; each must be named once, with the declared datatype (FP32, or INT64 for integer
// inputs), a shape matching the declared one (free dimensions any size >= 1, the same batch for
// every input) and shape's element count of numbers in `data` (flat or nested).
// The binary tensor data extension (Triton's, which KServe clients speak): with header_length
// (the Inference-Header-Content-Length header) the JSON is the body's first header_length bytes,
// and an input whose `parameters.binary_data_size` is given takes that many bytes of raw
// little-endian values from what follows, inputs in order, instead of `data`. kNoBinary: the
// whole body is JSON. `readable_past_end`: bytes of the body's buffer readable past its end; with
// kJsonPadding of them the JSON is parsed in place, without a padded copy of it.
constexpr std::size_t kNoBinary = static_cast<std::size_t>(-1);
constexpr std::size_t kJsonPadding = 64;  // simdjson's SIMDJSON_PADDING (checked in tensor_json.cpp)
InferRequest parse_infer_request(std::string_view body, std::size_t header_length,
                                 const std::vector<TensorSpec>& inputs, std::size_t readable_past_end = 0);

// The answer `{"model_name", "outputs": [{"name", "shape", "datatype", "data"}]}` (non-finite
// values as null); with binary, each output has `parameters.binary_data_size` instead of `data`,
// its raw values follow the JSON in order, and header_length is the JSON's size (for the
// Inference-Header-Content-Length header; 0 when not binary).
struct InferResponse {
  std::string body;
  std::size_t header_length = 0;
};
InferResponse infer_response(const std::string& model, const std::vector<std::string>& names,
                             const std::vector<TensorValues>& outputs, bool binary);

}  // namespace cpudl::serve
