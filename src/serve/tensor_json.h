// The KServe v2 / Open Inference Protocol's JSON tensors: a request's `inputs` parsed and checked
// against the model's inputs, and outputs written back in the same form. Requests come from the
// network: every malformed field is a RequestError naming it (HTTP 400), never a crash; the
// parser has a libFuzzer target (tests/fuzz/fuzz_tensor_json.cpp).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "cpudl/inference.h"
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

// The tensors of `{"inputs": [{"name", "shape", "datatype", "data"}, ...]}` in the model's input
// order; each must be named once, with the declared datatype (FP32, or INT64 for integer
// inputs), a shape matching the declared one (free dimensions any size >= 1, the same batch for
// every input) and shape's element count of numbers in `data` (flat or nested).
std::vector<Tensor> parse_infer_request(const std::string& body, const std::vector<TensorSpec>& inputs);

// `{"model_name", "outputs": [{"name", "shape", "datatype", "data"}]}`.
std::string infer_response(const std::string& model, const std::vector<TensorSpec>& specs,
                           const std::vector<Tensor>& outputs);

}  // namespace cpudl::serve
