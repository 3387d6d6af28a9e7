// Normalisations: BatchNormalization (inference statistics; usually folded into the preceding Conv
// by the optimiser), LayerNormalization, Softmax and LogSoftmax.
// Batch norm runs on oneDNN; row-wise work goes through the native kernel table (layer norm, softmax).
#include <cmath>
#include <cstring>

#include "dense/onednn/dense.h"
#include "infer/op_registry.h"
#include "kernels/dispatch.h"
#include "runtime/parallel.h"

namespace cpudl::infer {
namespace {

const kernels::KernelTable& native() { return kernels::kernel_table(); }

Kernel build_batch_norm(OpSetup& s) {
  s.require_inputs(5, 5);
  for (std::size_t i = 0; i < 5; ++i) s.require_f32(i);
  if (s.node.get_int("training_mode", 0) != 0) s.fail("training_mode = 1 is not supported at inference");
  if (s.node.outputs.size() > 1) s.fail("running-statistics outputs are not supported at inference");
  const Shape& x = s.shape(0);
  if (x.size() < 2) s.fail("input has shape " + shape_text(x) + ", expected N x C x ...");
  const std::int64_t c = x[1];
  for (std::size_t i = 1; i < 5; ++i)
    if (s.shape(i) != Shape{c})
      s.fail("input " + std::to_string(i) + " has shape " + shape_text(s.shape(i)) + ", expected [" +
             std::to_string(c) + "]");
  // oneDNN's inference batch norm (dense.h) over N x C x (spatial, as H x 1).
  onednn::BatchNormShape b;
  b.batch = x[0];
  b.channels = c;
  for (std::size_t i = 2; i < x.size(); ++i) b.height *= x[i];
  b.epsilon = s.node.get_float("epsilon", 1e-5f);
  s.set_output(0, DType::f32, x);
  return [b](std::span<const TensorView> in, std::span<const TensorView> o) {
    onednn::batch_norm_forward_inference(b, in[0].f32(), in[1].f32(), in[2].f32(), in[3].f32(), in[4].f32(),
                                         o[0].f32());
  };
}

Kernel build_layer_norm(OpSetup& s) {
  s.require_inputs(1, 3);
  s.require_present_f32();
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const std::int64_t axis = normalize_axis(s, s.node.get_int("axis", -1), rank, "axis");
  std::int64_t rows = 1, cols = 1;
  for (std::int64_t d = 0; d < rank; ++d) (d < axis ? rows : cols) *= x[static_cast<std::size_t>(d)];
  for (std::size_t i = 1; i < s.count(); ++i)
    if (s.has(i) && s.inputs[i].numel() != cols)
      s.fail("input " + std::to_string(i) + " has shape " + shape_text(s.shape(i)) + ", expected " +
             std::to_string(cols) + " elements (broadcast scale and bias are not supported)");
  const float eps = s.node.get_float("epsilon", 1e-5f);
  s.set_output(0, DType::f32, x);
  Shape stats(x.begin(), x.begin() + axis);
  for (std::int64_t d = axis; d < rank; ++d) stats.push_back(1);
  const std::size_t outputs = s.node.outputs.size();
  for (std::size_t i = 1; i < outputs; ++i) s.set_output(i, DType::f32, stats);
  auto scratch = std::make_shared<std::vector<float>>(static_cast<std::size_t>(2 * rows));
  const bool has_scale = s.has(1), has_bias = s.has(2);
  return [rows, cols, eps, scratch, has_scale, has_bias](std::span<const TensorView> in,
                                                         std::span<const TensorView> o) {
    float* mean = o.size() > 1 && o[1].data ? o[1].f32() : scratch->data();
    float* rstd = o.size() > 2 && o[2].data ? o[2].f32() : scratch->data() + rows;
    const float* gamma = has_scale ? in[1].f32() : nullptr;
    const float* beta = has_bias ? in[2].f32() : nullptr;
    const auto fn = native().f32_layer_norm_forward.fn;
    const auto c = static_cast<std::size_t>(cols);
    parallel_for(static_cast<std::size_t>(rows), std::max<std::size_t>(1, 16384 / c),
                 [&](std::size_t b, std::size_t e) {
                   fn(in[0].f32() + b * c, gamma, beta, o[0].f32() + b * c, mean + b, rstd + b, e - b, c,
                      eps);
                 });
  };
}

// Softmax over one axis. Opset 13 normalises over `axis` alone (default -1); opsets 11-12 over
// the flattened dims from `axis` on (default 1). Both reduce to contiguous rows when every dim
// after the axis is folded in; otherwise the rows are strided and are gathered into scratch.
template <bool kLog>
Kernel build_softmax(OpSetup& s) {
  s.require_inputs(1, 1);
  s.require_f32(0);
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const bool legacy = s.opset < 13;
  const std::int64_t axis =
      normalize_axis(s, s.node.get_int("axis", legacy ? 1 : -1), std::max<std::int64_t>(rank, 1), "axis");
  std::int64_t outer = 1, cols = 1, inner = 1;
  for (std::int64_t d = 0; d < rank; ++d) {
    const std::int64_t v = x[static_cast<std::size_t>(d)];
    if (d < axis)
      outer *= v;
    else if (d == axis || legacy)
      cols *= v;
    else
      inner *= v;
  }
  s.set_output(0, DType::f32, x);
  auto scratch = std::make_shared<std::vector<float>>(inner > 1 ? static_cast<std::size_t>(2 * cols) : 0);
  return [outer, cols, inner, scratch](std::span<const TensorView> in, std::span<const TensorView> o) {
    const auto fn = kLog ? native().f32_log_softmax.fn : native().f32_softmax.fn;
    const auto c = static_cast<std::size_t>(cols);
    if (inner == 1) {
      parallel_for(
          static_cast<std::size_t>(outer), std::max<std::size_t>(1, 16384 / c),
          [&](std::size_t b, std::size_t e) { fn(in[0].f32() + b * c, o[0].f32() + b * c, e - b, c, c, c); });
      return;
    }
    float* row = scratch->data();
    float* result = row + cols;
    for (std::int64_t r = 0; r < outer; ++r)
      for (std::int64_t j = 0; j < inner; ++j) {
        const float* src = in[0].f32() + r * cols * inner + j;
        float* dst = o[0].f32() + r * cols * inner + j;
        for (std::int64_t k = 0; k < cols; ++k) row[k] = src[k * inner];
        fn(row, result, 1, c, c, c);
        for (std::int64_t k = 0; k < cols; ++k) dst[k * inner] = result[k];
      }
  };
}

const OpEntry kOps[] = {
    {"BatchNormalization", build_batch_norm},
    {"LayerNormalization", build_layer_norm},
    {"Softmax", build_softmax<false>},
    {"LogSoftmax", build_softmax<true>},
};

}  // namespace

std::span<const OpEntry> normalization_ops() { return kOps; }

}  // namespace cpudl::infer
