// Running trained models: cpudl::InferenceSession loads an ONNX file (as PyTorch's
// torch.onnx.export writes it), optimises its graph once, and compiles one plan per set of input
// shapes (a new batch size compiles a new plan; plans are kept). Runs allocate nothing beyond the
// returned tensors.
//
//   auto s = cpudl::InferenceSession("model.onnx");
//   std::vector<cpudl::Tensor> y = s.run({x});
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpudl/tensor.h"

namespace cpudl {

struct InferenceOptions {
  bool optimize = true;  // graph rewrites (folding, fusion); off only to compare against them
  bool profile = false;  // per-step timing (also on when CPUDL_PROFILE=1)
  // Run the convolutions of QDQ (static int8) models on oneDNN's int8 kernels (AMX, VNNI), the
  // activations kept uint8 between them. Off: each stays a float convolution between its QDQ
  // pairs (the same numbers up to float rounding; for comparisons). On a CPU without VNNI a Conv
  // whose weights need all 8 bits stays float either way (the int16 pair sums would saturate).
  bool int8_convolutions = true;
  // Compute threads for this session's runs, whatever other sessions in the process use; 0: the
  // process default (compute_threads() of the calling thread).
  int threads = 0;
  // Convolutions and matrix products compute in bf16 as torch.autocast runs them (operands
  // rounded to bf16, sums and outputs f32; bias, residual and activation applied to the f32 sums)
  // on oneDNN's AMX or AVX512-BF16 kernels; activations between layers stay f32 (channels-last).
  // The session throws when the CPU has neither unit.
  bool bf16 = false;
  // A model whose Conv/Gemm/MatMul weights are stored in bfloat16 (`cpudl quantize --mode bf16`)
  // computes in bf16 as `bf16` does where the CPU has AMX or AVX512-BF16, without asking; off, or
  // on other CPUs, it computes what the file says (f32 arithmetic on the rounded weights).
  bool follow_bf16_weights = true;
  // The most iterations an ONNX Loop may run: a loop that would run more fails with an error
  // naming its node (a loop whose condition never turns false ends instead of hanging). Loops
  // that end on a condition have their scan outputs planned for this many iterations.
  std::int64_t max_loop_iterations = kDefaultMaxLoopIterations;
  static constexpr std::int64_t kDefaultMaxLoopIterations = 10000;
};

struct ModelValue {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;  // -1 for a dimension the model leaves free (a dynamic batch)
};

// The algorithm a node runs, where its operator has several (convolutions: dense/conv/conv_list.h).
struct NodeImplementation {
  std::string node, op, implementation;
};

// What `cpudl info` prints: the graph as loaded, what the optimiser did, and the plan for one
// input shape.
struct ModelInfo {
  std::string producer;
  std::int64_t opset = 0;
  std::vector<ModelValue> inputs, outputs;
  std::map<std::string, int> ops_loaded;   // operator -> nodes in the file
  std::map<std::string, int> ops_planned;  // operator -> kernels run per inference, after optimising
  std::int64_t parameters = 0;             // elements of the float and 8-bit initializers
  double flops = 0;                        // per inference at the planned shape
  std::size_t arena_bytes = 0;             // the memory plan's peak
  std::size_t unplanned_bytes = 0;         // one buffer per value
  Shape planned_input_shape;               // the first input's shape the plan was made for
  std::vector<std::string> rewrites;       // one line per optimiser rewrite
  std::string int8_execution;              // how this CPU runs the model's int8 operators ("" if none)
  std::map<std::string, int> rewrite_counts;
  std::vector<NodeImplementation> implementations;
};

struct OpProfile {
  std::string op;
  std::int64_t calls = 0;
  std::int64_t alone_calls = 0;  // calls run on the calling thread alone: too little work to share
  double seconds = 0, flops = 0;
};

class InferenceSession {
 public:
  explicit InferenceSession(const std::filesystem::path& model, InferenceOptions options = {});
  ~InferenceSession();
  InferenceSession(InferenceSession&&) noexcept;
  InferenceSession& operator=(InferenceSession&&) noexcept;

  // Inputs in the model's input order (f32, i64, i32 or i8 tensors of the declared types); any
  // layout (made contiguous). Throws Error naming the input on a wrong count, shape or type.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // The same into `outputs`, which must already hold contiguous tensors of the output shapes and
  // types (a previous run's results, say): with the plan compiled, this allocates nothing.
  void run_into(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs);

  const std::vector<ModelValue>& inputs() const;
  const std::vector<ModelValue>& outputs() const;
  // The file's metadata_props (cpudl export writes cpudl.architecture, cpudl.normalization_mean,
  // cpudl.normalization_std and cpudl.classes).
  const std::map<std::string, std::string>& metadata() const;
  // Compiles (or reuses) the plan for these input shapes and describes it.
  ModelInfo info(const std::vector<Shape>& input_shapes);
  // Accumulated per-operator time since the last reset (profiling on).
  std::vector<OpProfile> profile() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cpudl
