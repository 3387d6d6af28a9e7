// Operators of detectors' post-processing: NonZero and NonMaxSuppression (outputs sized by their
// input data: planned at their bound, see plan.h) and TopK.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "infer/nms.h"
#include "infer/op_registry.h"

namespace cpudl::infer {
namespace {

// NonZero: the indices of the non-zero elements, one row per dimension (int64 [rank, count]).
Kernel build_nonzero(OpSetup& s) {
  s.require_inputs(1, 1);
  const DType t = s.inputs[0].dtype;
  if (t != DType::f32 && t != DType::i64 && t != DType::i32 && t != DType::i8 && t != DType::u8)
    s.fail("element type " + std::string(dtype_name(t)) + " is not supported");
  const auto rank = static_cast<std::int64_t>(s.shape(0).size());
  s.set_output(0, DType::i64, {std::max<std::int64_t>(rank, 1), s.inputs[0].numel()});
  s.sets_output_shapes = true;
  return [t](std::span<const TensorView> in, std::span<const TensorView> out) {
    const Shape& x = *in[0].shape;
    const std::int64_t n = shape_numel(x),
                       rank = std::max<std::int64_t>(static_cast<std::int64_t>(x.size()), 1);
    auto nonzero = [&](std::int64_t i) {
      switch (t) {
        case DType::f32:
          return static_cast<const float*>(in[0].data)[i] != 0.0f;
        case DType::i64:
          return static_cast<const std::int64_t*>(in[0].data)[i] != 0;
        case DType::i32:
          return static_cast<const std::int32_t*>(in[0].data)[i] != 0;
        default:
          return static_cast<const std::int8_t*>(in[0].data)[i] != 0;
      }
    };
    std::int64_t count = 0;
    for (std::int64_t i = 0; i < n; ++i) count += nonzero(i);
    auto* dst = static_cast<std::int64_t*>(out[0].data);
    std::int64_t j = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (!nonzero(i)) continue;
      std::int64_t rest = i;
      for (std::int64_t d = static_cast<std::int64_t>(x.size()); d-- > 0;) {
        dst[d * count + j] = rest % x[static_cast<std::size_t>(d)];
        rest /= x[static_cast<std::size_t>(d)];
      }
      if (x.empty()) dst[j] = 0;
      ++j;
    }
    *out[0].run_shape = {rank, count};
  };
}

// NonMaxSuppression: boxes [batches, boxes, 4], scores [batches, classes, boxes] -> int64
// [selected, 3] rows of (batch, class, box), batch by batch, class by class, best first.
Kernel build_non_max_suppression(OpSetup& s) {
  s.require_inputs(2, 5);
  s.require_f32(0);
  s.require_f32(1);
  const Shape& boxes = s.shape(0);
  const Shape& scores = s.shape(1);
  if (boxes.size() != 3 || boxes[2] != 4)
    s.fail("boxes must be [batches, boxes, 4], got " + shape_text(boxes));
  if (scores.size() != 3 || scores[0] != boxes[0] || scores[2] != boxes[1])
    s.fail("scores must be [batches, classes, boxes] = [" + std::to_string(boxes[0]) + ", C, " +
           std::to_string(boxes[1]) + "] for boxes " + shape_text(boxes) + ", got " + shape_text(scores));
  const std::int64_t center = s.node.get_int("center_point_box", 0);
  if (center != 0 && center != 1) s.fail("center_point_box must be 0 or 1, got " + std::to_string(center));
  // The thresholds are the graph's constants in every exporter's output; the bound needs the
  // maximum per class.
  NmsOptions options;
  options.center_point_box = center == 1;
  options.max_per_class = s.has(2) ? s.constant(2, "max_output_boxes_per_class").as_int64().at(0) : 0;
  if (s.has(3)) options.iou_threshold = s.constant(3, "iou_threshold").as_float().at(0);
  if (s.has(4)) options.score_threshold = s.constant(4, "score_threshold").as_float().at(0);
  if (options.iou_threshold < 0 || options.iou_threshold > 1 || std::isnan(options.iou_threshold))
    s.fail("iou_threshold " + std::to_string(options.iou_threshold) + " is outside [0, 1]");
  const std::int64_t per_class = std::clamp<std::int64_t>(options.max_per_class, 0, boxes[1]);
  s.set_output(0, DType::i64, {boxes[0] * scores[1] * per_class, 3});
  s.sets_output_shapes = true;
  auto scratch = std::make_shared<NmsScratch>();
  auto kept = std::make_shared<std::vector<std::int32_t>>();
  return [options, scratch, kept](std::span<const TensorView> in, std::span<const TensorView> out) {
    const Shape& b = *in[0].shape;
    const Shape& sc = *in[1].shape;
    const std::int64_t batches = b[0], count = b[1], classes = sc[1];
    auto* dst = static_cast<std::int64_t*>(out[0].data);
    std::int64_t rows = 0;
    for (std::int64_t n = 0; n < batches; ++n) {
      nms_prepare_boxes(in[0].f32() + n * count * 4, count, options.center_point_box, *scratch);
      for (std::int64_t c = 0; c < classes; ++c) {
        kept->clear();
        nms_one_class(in[1].f32() + (n * classes + c) * count, count, options, *scratch, *kept);
        for (const std::int32_t k : *kept) {
          dst[rows * 3] = n;
          dst[rows * 3 + 1] = c;
          dst[rows * 3 + 2] = k;
          ++rows;
        }
      }
    }
    *out[0].run_shape = {rows, 3};
  };
}

// TopK: the k largest (or smallest) along an axis, sorted; equal values by increasing index, as
// ONNX specifies.
Kernel build_topk(OpSetup& s) {
  s.require_inputs(2, 2);
  const DType t = s.inputs[0].dtype;
  if (t != DType::f32 && t != DType::i64)
    s.fail("element type " + std::string(dtype_name(t)) + " is not supported");
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const auto axis = static_cast<std::size_t>(normalize_axis(s, s.node.get_int("axis", -1), rank, "axis"));
  const std::int64_t k = s.constant(1, "K").as_int64().at(0);
  if (k < 0 || k > x[axis])
    s.fail("K = " + std::to_string(k) + " is outside [0, " + std::to_string(x[axis]) + "] (axis " +
           std::to_string(axis) + " of " + shape_text(x) + ")");
  const bool largest = s.node.get_int("largest", 1) != 0;
  Shape out = x;
  out[axis] = k;
  s.set_output(0, t, out);
  s.set_output(1, DType::i64, out);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= x[d];
  for (std::size_t d = axis + 1; d < x.size(); ++d) inner *= x[d];
  const std::int64_t n = x[axis];
  auto order = std::make_shared<std::vector<std::int64_t>>();
  return
      [t, outer, inner, n, k, largest, order](std::span<const TensorView> in, std::span<const TensorView> o) {
        auto run = [&](auto tag) {
          using T = decltype(tag);
          const T* src = static_cast<const T*>(in[0].data);
          T* values = static_cast<T*>(o[0].data);
          auto* indices = static_cast<std::int64_t*>(o[1].data);
          order->resize(static_cast<std::size_t>(n));
          for (std::int64_t r = 0; r < outer; ++r)
            for (std::int64_t i = 0; i < inner; ++i) {
              const T* p = src + r * n * inner + i;
              for (std::int64_t j = 0; j < n; ++j) (*order)[static_cast<std::size_t>(j)] = j;
              std::partial_sort(order->begin(), order->begin() + k, order->end(),
                                [&](std::int64_t a, std::int64_t b) {
                                  const T va = p[a * inner], vb = p[b * inner];
                                  return (largest ? va > vb : va < vb) || (va == vb && a < b);
                                });
              for (std::int64_t j = 0; j < k; ++j) {
                const std::int64_t at = (r * k + j) * inner + i, from = (*order)[static_cast<std::size_t>(j)];
                values[at] = p[from * inner];
                indices[at] = from;
              }
            }
        };
        if (t == DType::f32)
          run(float{});
        else
          run(std::int64_t{});
      };
}

const OpEntry kOps[] = {
    {"NonZero", build_nonzero},
    {"NonMaxSuppression", build_non_max_suppression},
    {"TopK", build_topk},
};

}  // namespace

std::span<const OpEntry> detection_ops() { return kOps; }

}  // namespace cpudl::infer
