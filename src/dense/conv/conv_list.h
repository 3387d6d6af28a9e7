// Which algorithm runs a convolution. One ordered list, in the manner of oneDNN's
// cpu_convolution_list.cpp, walked by training's conv2d (ops/convolution.cpp), the ONNX
// runtime's Conv and ConvTranspose (infer/ops/dense.cpp), `cpudl bench conv` and the tests: the
// most specialised algorithms first, oneDNN's f32 and bf16 primitives after them, and a
// reference last. For each pass of a layer the first entry that can run the shape and prefers it
// runs it.
//
// Each entry answers two questions. runs(): can it compute this shape, pass and context
// correctly (the tests run every entry that can, against a double-precision reference).
// prefers(): should it, on this machine -- where it measured faster than the entries below it
// (the measurements are in docs/ARCHITECTURE.md; the rules in each algorithm's header).
//
// CPUDL_CONV_IMPL=<name> forces one entry for every pass it has (the others walk as usual); it
// is an error, naming the entries that can, when the forced one cannot run a shape.
// CPUDL_VERBOSE=1 prints `conv <shape> <pass> -> <entry>` once per shape and pass.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dense/shapes.h"

namespace cpudl::conv {

enum class ConvPass { forward, backward_data, backward_weights };
std::string_view pass_name(ConvPass pass);

// What the caller knows beyond the shape.
struct ConvContext {
  // The weights stay the same for many runs (an inference plan): an entry may transform them once
  // (prepare). Otherwise they change on every call, as in training.
  bool constant_weights = false;
  // Products in bf16 (Bf16Autocast): forward, backward-data and stride-1 weight gradients.
  bool bf16 = false;
  // Forward: what must be fused after the convolution.
  dense::Activation activation = dense::Activation::none;
  bool residual = false;
  // Forward: the input needs a gradient, so the layer cannot be a first layer whose backward pass
  // computes the weight gradient only (planar).
  bool input_needs_grad = true;
};

// What an entry keeps between runs on the same weights: Winograd's transformed weights, the
// whole-map product's expanded matrix.
class ConvPrepared {
 public:
  virtual ~ConvPrepared() = default;
};

// One call's operands; which are read depends on the pass. Activations in the shape's layouts
// (the output in s.dst_layout when set); weights OIHW.
struct ConvArgs {
  const float* src = nullptr;              // forward, backward_weights: x; backward_data: dy
  const float* weights = nullptr;          // forward, backward_data
  std::uint64_t weights_version = 0;       // oneDNN's cache of reordered weights (onednn/dense.h); 0: none
  const float* diff_dst = nullptr;         // backward_weights: dy
  const float* bias = nullptr;             // forward, or null
  dense::ConvEpilogue epilogue;            // forward
  float* dst = nullptr;                    // y, dx, or dw
  float* diff_bias = nullptr;              // backward_weights: db, or null
  const ConvPrepared* prepared = nullptr;  // from this entry's prepare() for these weights, or null
};

// Passes as bits, for ConvImpl::passes.
constexpr unsigned pass_bit(ConvPass pass) { return 1u << static_cast<unsigned>(pass); }
inline constexpr unsigned kAllPasses = 7;

struct ConvImpl {
  std::string_view name;
  unsigned passes;  // the passes this entry implements (pass_bit)
  bool (*runs)(const dense::ConvShape&, ConvPass, const ConvContext&);
  bool (*prefers)(const dense::ConvShape&, ConvPass, const ConvContext&);
  void (*run)(const dense::ConvShape&, ConvPass, const ConvArgs&);
  // Null when the entry keeps nothing. A prepared state made for one pass serves `serves_passes`:
  // true when it serves every pass of the same weights (the whole-map product's E serves forward
  // and backward-data), false when only the pass it was made for (Winograd's transformed filters).
  std::shared_ptr<const ConvPrepared> (*prepare)(const dense::ConvShape&, ConvPass,
                                                 const float* weights) = nullptr;
  bool serves_passes = false;
};

// The list, most specialised first.
std::span<const ConvImpl> conv_impls();
// The entry named `name`, or null.
const ConvImpl* find_conv_impl(std::string_view name);

using dense::layout_name;

// The entry that runs this pass: CPUDL_CONV_IMPL's when set and it has the pass, else the first
// that runs and prefers it. Throws UsageError for an unknown CPUDL_CONV_IMPL or one that cannot
// run this shape. `log`: false for a caller that only asks (a planner's shape pass), so that
// CPUDL_VERBOSE names the convolutions that run.
const ConvImpl& choose_conv_impl(const dense::ConvShape& s, ConvPass pass, const ConvContext& context,
                                 bool log = true);

}  // namespace cpudl::conv
