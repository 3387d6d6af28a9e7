// Operators that move data without arithmetic: Reshape, Flatten, Squeeze, Unsqueeze, Identity and
// Dropout (views: the output shares the input's memory), Transpose, Slice, Expand and Tile (one
// strided copy each), Concat, Split, Gather, and the shape producers Shape, Constant,
// ConstantOfShape, Range.
// Shape arguments (Reshape's shape, Slice's starts...) must be known when the plan is built: with
// the input shapes fixed, the Shape/Gather/Concat chains exporters emit fold to constants first.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "dense/onednn/dense.h"
#include "infer/op_list.h"
#include "infer/op_registry.h"
#include "runtime/parallel.h"

namespace cpudl::infer {
namespace {

// Copies out[i...] = in[in_offset + sum(i_d * in_strides_d)] for every index of `out`, with the
// dims merged where the input is contiguous across them; an inner stride of 1 copies runs.
struct StridedCopy {
  std::size_t element = 4;
  std::int64_t in_offset = 0;
  std::int64_t inner = 1;
  bool inner_contiguous = true;
  std::int64_t inner_stride = 1;
  std::vector<std::int64_t> block_offsets;  // input offset of each inner block

  StridedCopy(const Shape& out, const std::vector<std::int64_t>& in_strides, std::int64_t offset,
              std::size_t element_bytes)
      : element(element_bytes), in_offset(offset) {
    if (shape_numel(out) == 0) return;  // an empty value (no detections): no blocks to copy
    Shape dims;
    std::vector<std::int64_t> strides;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i] == 1) continue;
      if (!dims.empty() && strides.back() == in_strides[i] * out[i]) {
        dims.back() *= out[i];
        strides.back() = in_strides[i];
        continue;
      }
      dims.push_back(out[i]);
      strides.push_back(in_strides[i]);
    }
    if (dims.empty()) {
      block_offsets = {0};
      return;
    }
    inner = dims.back();
    inner_stride = strides.back();
    inner_contiguous = inner_stride == 1;
    std::int64_t outer = 1;
    for (std::size_t i = 0; i + 1 < dims.size(); ++i) outer *= dims[i];
    block_offsets.resize(static_cast<std::size_t>(outer));
    std::vector<std::int64_t> index(dims.size(), 0);
    for (std::int64_t o = 0; o < outer; ++o) {
      std::int64_t off = 0;
      for (std::size_t i = 0; i + 1 < dims.size(); ++i) off += index[i] * strides[i];
      block_offsets[static_cast<std::size_t>(o)] = off;
      for (std::size_t i = dims.size() - 1; i-- > 0;) {
        if (++index[i] < dims[i]) break;
        index[i] = 0;
      }
    }
  }

  void run(const void* src, void* dst) const {
    if (block_offsets.empty()) return;
    const auto* in = static_cast<const std::byte*>(src) + in_offset * static_cast<std::int64_t>(element);
    auto* out = static_cast<std::byte*>(dst);
    const auto e = static_cast<std::int64_t>(element);
    parallel_for(block_offsets.size(), std::max<std::size_t>(1, 65536 / static_cast<std::size_t>(inner * e)),
                 [&](std::size_t b, std::size_t end) {
                   for (std::size_t o = b; o < end; ++o) {
                     const std::byte* from = in + block_offsets[o] * e;
                     std::byte* to = out + static_cast<std::int64_t>(o) * inner * e;
                     if (inner_contiguous) {
                       std::memcpy(to, from, static_cast<std::size_t>(inner * e));
                     } else if (e == 4) {
                       for (std::int64_t i = 0; i < inner; ++i)
                         std::memcpy(to + i * 4, from + i * inner_stride * 4, 4);
                     } else {
                       for (std::int64_t i = 0; i < inner; ++i)
                         std::memcpy(to + i * e, from + i * inner_stride * e, static_cast<std::size_t>(e));
                     }
                   }
                 });
  }
};

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

Kernel view(OpSetup& s, DType dtype, Shape shape) {
  if (shape_numel(shape) != s.inputs[0].numel())
    s.fail("cannot view " + shape_text(s.shape(0)) + " as " + shape_text(shape));
  s.set_output(0, dtype, std::move(shape));
  s.output_aliases_input = true;
  return [](std::span<const TensorView>, std::span<const TensorView>) {};
}

// Optional int64 list argument given as input `i` (newer opsets) or attribute `key` (older).
std::vector<std::int64_t> list_argument(const OpSetup& s, std::size_t i, const char* key,
                                        bool* given = nullptr) {
  if (s.has(i)) {
    if (given) *given = true;
    return s.constant(i, key).as_int64();
  }
  if (given) *given = s.node.has(key);
  return s.node.get_ints(key);
}

Kernel build_identity(OpSetup& s) {
  s.require_inputs(1, 3);  // Dropout's ratio and training_mode inputs are ignored at inference
  if (s.node.op == "Dropout" && s.has(2) && s.constants[2] && s.constants[2]->as_int64().at(0) != 0)
    s.fail("training_mode = true is not supported at inference");
  if (s.node.outputs.size() > 1 && !s.node.outputs[1].empty())
    s.fail("the mask output of Dropout is not supported");
  return view(s, s.inputs[0].dtype, s.shape(0));
}

Kernel build_reshape(OpSetup& s) {
  s.require_inputs(2, 2);
  const std::vector<std::int64_t> target = s.constant(1, "shape").as_int64();
  const bool allow_zero = s.node.get_int("allowzero", 0) != 0;
  Shape out;
  std::int64_t infer_at = -1, known = 1;
  for (std::size_t i = 0; i < target.size(); ++i) {
    std::int64_t d = target[i];
    if (d == 0 && !allow_zero) {
      if (i >= s.shape(0).size())
        s.fail("shape " + shape_text(target) + " copies a dimension the input " + shape_text(s.shape(0)) +
               " lacks");
      d = s.shape(0)[i];
    }
    if (d == -1) {
      if (infer_at >= 0) s.fail("shape " + shape_text(target) + " has more than one -1");
      infer_at = static_cast<std::int64_t>(i);
      out.push_back(1);
      continue;
    }
    if (d < 0) s.fail("shape " + shape_text(target) + " has a negative dimension");
    known *= d;
    out.push_back(d);
  }
  if (infer_at >= 0) {
    if (known == 0 || s.inputs[0].numel() % known != 0)
      s.fail("cannot reshape " + shape_text(s.shape(0)) + " to " + shape_text(target));
    out[static_cast<std::size_t>(infer_at)] = s.inputs[0].numel() / known;
  }
  return view(s, s.inputs[0].dtype, out);
}

Kernel build_flatten(OpSetup& s) {
  s.require_inputs(1, 1);
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const std::int64_t axis = normalize_axis(s, s.node.get_int("axis", 1), rank + 1, "axis");
  std::int64_t outer = 1;
  for (std::int64_t i = 0; i < axis; ++i) outer *= x[static_cast<std::size_t>(i)];
  return view(s, s.inputs[0].dtype, {outer, s.inputs[0].numel() / std::max<std::int64_t>(outer, 1)});
}

Kernel build_squeeze(OpSetup& s) {
  s.require_inputs(1, 2);
  const Shape& x = s.shape(0);
  bool given = false;
  std::vector<std::int64_t> axes = list_argument(s, 1, "axes", &given);
  std::vector<bool> drop(x.size(), false);
  if (!given) {
    for (std::size_t i = 0; i < x.size(); ++i) drop[i] = x[i] == 1;
  }
  for (std::int64_t a : axes) {
    const std::int64_t axis = normalize_axis(s, a, static_cast<std::int64_t>(x.size()), "axes");
    if (x[static_cast<std::size_t>(axis)] != 1)
      s.fail("cannot squeeze axis " + std::to_string(a) + " of " + shape_text(x) + " (its size is not 1)");
    drop[static_cast<std::size_t>(axis)] = true;
  }
  Shape out;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!drop[i]) out.push_back(x[i]);
  return view(s, s.inputs[0].dtype, out);
}

Kernel build_unsqueeze(OpSetup& s) {
  s.require_inputs(1, 2);
  const Shape& x = s.shape(0);
  const std::vector<std::int64_t> axes = list_argument(s, 1, "axes");
  const auto rank = static_cast<std::int64_t>(x.size() + axes.size());
  std::vector<bool> inserted(static_cast<std::size_t>(rank), false);
  for (std::int64_t a : axes) {
    const std::int64_t axis = normalize_axis(s, a, rank, "axes");
    if (inserted[static_cast<std::size_t>(axis)]) s.fail("axes repeat " + std::to_string(a));
    inserted[static_cast<std::size_t>(axis)] = true;
  }
  Shape out;
  std::size_t next = 0;
  for (std::int64_t i = 0; i < rank; ++i)
    out.push_back(inserted[static_cast<std::size_t>(i)] ? 1 : x[next++]);
  return view(s, s.inputs[0].dtype, out);
}

Kernel strided_copy(OpSetup& s, Shape out, const std::vector<std::int64_t>& in_strides, std::int64_t offset) {
  const DType t = s.inputs[0].dtype;
  auto copy = std::make_shared<StridedCopy>(out, in_strides, offset, dtype_size(t));
  s.set_output(0, t, std::move(out));
  return [copy](std::span<const TensorView> in, std::span<const TensorView> o) {
    copy->run(in[0].data, o[0].data);
  };
}

Kernel build_transpose(OpSetup& s) {
  s.require_inputs(1, 1);
  const Shape& x = s.shape(0);
  std::vector<std::int64_t> perm = s.node.get_ints("perm");
  if (perm.empty())
    for (std::size_t i = x.size(); i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
  if (perm.size() != x.size()) s.fail("perm " + shape_text(perm) + " does not fit input " + shape_text(x));
  const auto in_strides = contiguous_strides(x);
  std::vector<bool> seen(x.size(), false);
  Shape out;
  std::vector<std::int64_t> strides;
  for (std::int64_t p : perm) {
    const std::int64_t axis = normalize_axis(s, p, static_cast<std::int64_t>(x.size()), "perm");
    if (seen[static_cast<std::size_t>(axis)]) s.fail("perm " + shape_text(perm) + " is not a permutation");
    seen[static_cast<std::size_t>(axis)] = true;
    out.push_back(x[static_cast<std::size_t>(axis)]);
    strides.push_back(in_strides[static_cast<std::size_t>(axis)]);
  }
  return strided_copy(s, out, strides, 0);
}

Kernel build_expand(OpSetup& s) {
  s.require_inputs(2, 2);
  const std::vector<std::int64_t> target = s.constant(1, "shape").as_int64();
  const Shape& x = s.shape(0);
  const Shape out = broadcast_shapes(s, x, target);
  const auto in_strides = contiguous_strides(x);
  std::vector<std::int64_t> strides(out.size(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t o = out.size() - x.size() + i;
    strides[o] = x[i] == 1 ? 0 : in_strides[i];
  }
  return strided_copy(s, out, strides, 0);
}

// Tile: the output, seen as [r0, x0, r1, x1, ...] (repeat, then the input's dimension), is one
// strided copy whose repeat dimensions have stride 0.
Kernel build_tile(OpSetup& s) {
  s.require_inputs(2, 2);
  const Shape& x = s.shape(0);
  const std::vector<std::int64_t> repeats = s.constant(1, "repeats").as_int64();
  if (repeats.size() != x.size())
    s.fail("repeats has " + std::to_string(repeats.size()) + " entries for an input of rank " +
           std::to_string(x.size()));
  const auto in_strides = contiguous_strides(x);
  Shape split, out;
  std::vector<std::int64_t> strides;
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (repeats[d] < 0)
      s.fail("repeats[" + std::to_string(d) + "] = " + std::to_string(repeats[d]) + " is negative");
    split.insert(split.end(), {repeats[d], x[d]});
    strides.insert(strides.end(), {0, in_strides[d]});
    out.push_back(repeats[d] * x[d]);
  }
  Kernel k = strided_copy(s, split, strides, 0);
  s.set_output(0, s.inputs[0].dtype, out);
  return k;
}

// Range: start, start + delta, ... while below limit (above, for a negative delta).
Kernel build_range(OpSetup& s) {
  s.require_inputs(3, 3);
  const DType t = s.inputs[0].dtype;
  if (t != DType::f32 && t != DType::i64 && t != DType::i32)
    s.fail("element type " + std::string(dtype_name(t)) + " is not supported (FLOAT, INT64, INT32 are)");
  const double start = s.constant(0, "start").as_float().at(0),
               limit = s.constant(1, "limit").as_float().at(0),
               delta = s.constant(2, "delta").as_float().at(0);
  if (delta == 0) s.fail("delta is 0");
  std::int64_t n = 0;
  if (t == DType::f32) {
    n = std::max<std::int64_t>(static_cast<std::int64_t>(std::ceil((limit - start) / delta)), 0);
  } else {  // exact integer arithmetic
    const std::int64_t a = s.constant(0, "start").as_int64().at(0),
                       b = s.constant(1, "limit").as_int64().at(0),
                       d = s.constant(2, "delta").as_int64().at(0);
    const std::int64_t span = b - a;
    n = std::max<std::int64_t>(d > 0 ? (span + d - 1) / d : (span + d + 1) / d, 0);
  }
  s.set_output(0, t, {n});
  return [t, n](std::span<const TensorView> in, std::span<const TensorView> out) {
    if (t == DType::f32) {
      const float a = *in[0].f32(), d = *in[2].f32();
      for (std::int64_t i = 0; i < n; ++i) out[0].f32()[i] = a + static_cast<float>(i) * d;
    } else if (t == DType::i64) {
      const auto a = *static_cast<const std::int64_t*>(in[0].data),
                 d = *static_cast<const std::int64_t*>(in[2].data);
      for (std::int64_t i = 0; i < n; ++i) static_cast<std::int64_t*>(out[0].data)[i] = a + i * d;
    } else {
      const auto a = *static_cast<const std::int32_t*>(in[0].data),
                 d = *static_cast<const std::int32_t*>(in[2].data);
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::int32_t*>(out[0].data)[i] = static_cast<std::int32_t>(a + i * d);
    }
  };
}

Kernel build_slice(OpSetup& s) {
  s.require_inputs(1, 5);
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (s.count() >= 3) {
    starts = s.constant(1, "starts").as_int64();
    ends = s.constant(2, "ends").as_int64();
    if (s.has(3)) axes = s.constant(3, "axes").as_int64();
    if (s.has(4)) steps = s.constant(4, "steps").as_int64();
  } else {
    starts = s.node.get_ints("starts");
    ends = s.node.get_ints("ends");
    axes = s.node.get_ints("axes");
  }
  if (starts.size() != ends.size()) s.fail("starts and ends have different lengths");
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    s.fail("axes and steps must match starts");
  Shape out = x;
  auto strides = contiguous_strides(x);
  std::int64_t offset = 0;
  std::vector<bool> seen(x.size(), false);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::int64_t axis = normalize_axis(s, axes[i], rank, "axes");
    if (seen[static_cast<std::size_t>(axis)]) s.fail("axes repeat " + std::to_string(axes[i]));
    seen[static_cast<std::size_t>(axis)] = true;
    const std::int64_t dim = x[static_cast<std::size_t>(axis)], step = steps[i];
    if (step == 0) s.fail("a step of 0");
    auto clamp = [&](std::int64_t v, std::int64_t lo, std::int64_t hi) {
      if (v < 0) v += dim;
      return std::min(std::max(v, lo), hi);
    };
    std::int64_t begin, end;
    if (step > 0) {
      begin = clamp(starts[i], 0, dim);
      end = clamp(ends[i], 0, dim);
    } else {
      begin = clamp(starts[i], 0, dim - 1);
      end = clamp(ends[i], -1, dim - 1);
      if (ends[i] < -dim) end = -1;
    }
    const std::int64_t count = step > 0 ? std::max<std::int64_t>(0, (end - begin + step - 1) / step)
                                        : std::max<std::int64_t>(0, (begin - end - step - 1) / -step);
    out[static_cast<std::size_t>(axis)] = count;
    offset += begin * strides[static_cast<std::size_t>(axis)];
    strides[static_cast<std::size_t>(axis)] *= step;
  }
  return strided_copy(s, out, strides, offset);
}

Kernel build_concat(OpSetup& s) {
  if (s.count() < 1) s.fail("needs at least one input");
  const DType t = s.inputs[0].dtype;
  // An empty input that does not fit the others is left out, as torch.cat does (exported
  // post-processing concatenates onto empty starts, [0] or [0, 0]).
  std::size_t reference = 0;
  while (reference + 1 < s.count() && s.inputs[reference].numel() == 0) ++reference;
  const Shape& first = s.shape(reference);
  const auto rank = static_cast<std::int64_t>(first.size());
  const std::int64_t axis = normalize_axis(s, s.node.get_int("axis", 0), rank, "axis");
  Shape out = first;
  out[static_cast<std::size_t>(axis)] = 0;
  std::vector<bool> skipped(s.count(), false);
  for (std::size_t i = 0; i < s.count(); ++i) {
    const Shape& x = s.shape(i);
    if (s.inputs[i].dtype != t) s.fail("inputs have different element types");
    bool fits = x.size() == first.size();
    for (std::size_t d = 0; fits && d < x.size(); ++d)
      fits = static_cast<std::int64_t>(d) == axis || x[d] == first[d];
    if (!fits && s.inputs[i].numel() == 0) {
      skipped[i] = true;
      continue;
    }
    if (!fits)
      s.fail("input " + std::to_string(i) + " has shape " + shape_text(x) +
             ", which does not concatenate with " + shape_text(first) + " on axis " + std::to_string(axis));
    out[static_cast<std::size_t>(axis)] += x[static_cast<std::size_t>(axis)];
  }
  std::vector<std::int64_t> widths;  // bytes of each input per outer index
  std::int64_t outer = 1, inner = static_cast<std::int64_t>(dtype_size(t));
  for (std::int64_t d = 0; d < axis; ++d) outer *= first[static_cast<std::size_t>(d)];
  for (std::int64_t d = axis + 1; d < rank; ++d) inner *= first[static_cast<std::size_t>(d)];
  // The optimiser's channels-last region (optimizer.h's assign_layouts): channels are innermost,
  // one run per pixel. (In channel blocks, all full, each image's channels are contiguous as in
  // NCHW: the plain concatenation is already right.)
  if (s.node.get_int("cpudl.layout", 0) == static_cast<std::int64_t>(onednn::ActivationLayout::nhwc)) {
    if (rank != 4 || axis != 1)
      s.fail("concatenates channels-last values on an axis other than the channels");
    outer = first[0] * first[2] * first[3];
    inner = static_cast<std::int64_t>(dtype_size(t));
  }
  for (std::size_t i = 0; i < s.count(); ++i)
    widths.push_back(skipped[i] ? 0 : s.shape(i)[static_cast<std::size_t>(axis)] * inner);
  s.set_output(0, t, out);
  return [outer, widths](std::span<const TensorView> in, std::span<const TensorView> o) {
    std::int64_t total = 0;
    for (std::int64_t w : widths) total += w;
    auto* dst = static_cast<std::byte*>(o[0].data);
    for (std::int64_t r = 0; r < outer; ++r) {
      std::int64_t at = r * total;
      for (std::size_t i = 0; i < widths.size(); ++i) {
        if (widths[i] == 0) continue;  // an empty input: its data may be no pointer at all
        std::memcpy(dst + at, static_cast<const std::byte*>(in[i].data) + r * widths[i],
                    static_cast<std::size_t>(widths[i]));
        at += widths[i];
      }
    }
  };
}

Kernel build_split(OpSetup& s) {
  s.require_inputs(1, 2);
  const Shape& x = s.shape(0);
  const DType t = s.inputs[0].dtype;
  const auto rank = static_cast<std::int64_t>(x.size());
  const std::int64_t axis = normalize_axis(s, s.node.get_int("axis", 0), rank, "axis");
  const std::int64_t dim = x[static_cast<std::size_t>(axis)];
  std::vector<std::int64_t> split = list_argument(s, 1, "split");
  const auto parts = static_cast<std::int64_t>(s.node.outputs.size());
  if (split.empty()) {
    if (parts < 1) s.fail("no outputs");
    const std::int64_t size = (dim + parts - 1) / parts;
    for (std::int64_t i = 0; i < parts; ++i) split.push_back(std::min(size, dim - i * size));
  }
  std::int64_t sum = 0;
  for (std::int64_t v : split) {
    if (v < 0) s.fail("negative split size");
    sum += v;
  }
  if (sum != dim || static_cast<std::int64_t>(split.size()) != parts)
    s.fail("split " + shape_text(split) + " does not divide axis " + std::to_string(axis) + " of " +
           shape_text(x) + " into " + std::to_string(parts) + " outputs");
  std::int64_t outer = 1, inner = static_cast<std::int64_t>(dtype_size(t));
  for (std::int64_t d = 0; d < axis; ++d) outer *= x[static_cast<std::size_t>(d)];
  for (std::int64_t d = axis + 1; d < rank; ++d) inner *= x[static_cast<std::size_t>(d)];
  std::vector<std::int64_t> widths;
  for (std::size_t i = 0; i < split.size(); ++i) {
    Shape out = x;
    out[static_cast<std::size_t>(axis)] = split[i];
    s.set_output(i, t, out);
    widths.push_back(split[i] * inner);
  }
  return [outer, widths, total = dim * inner](std::span<const TensorView> in, std::span<const TensorView> o) {
    const auto* src = static_cast<const std::byte*>(in[0].data);
    for (std::int64_t r = 0; r < outer; ++r) {
      std::int64_t at = r * total;
      for (std::size_t i = 0; i < widths.size(); ++i) {
        std::memcpy(static_cast<std::byte*>(o[i].data) + r * widths[i], src + at,
                    static_cast<std::size_t>(widths[i]));
        at += widths[i];
      }
    }
  };
}

Kernel build_gather(OpSetup& s) {
  s.require_inputs(2, 2);
  const Shape& x = s.shape(0);
  const Shape& idx = s.shape(1);
  const DType t = s.inputs[0].dtype;
  if (s.inputs[1].dtype != DType::i64 && s.inputs[1].dtype != DType::i32)
    s.fail("indices must be INT64 or INT32");
  const auto rank = static_cast<std::int64_t>(x.size());
  if (rank == 0) s.fail("data must have rank 1 or more");
  const std::int64_t axis = normalize_axis(s, s.node.get_int("axis", 0), rank, "axis");
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  std::int64_t outer = 1, inner = static_cast<std::int64_t>(dtype_size(t));
  for (std::int64_t d = 0; d < axis; ++d) outer *= x[static_cast<std::size_t>(d)];
  for (std::int64_t d = axis + 1; d < rank; ++d) inner *= x[static_cast<std::size_t>(d)];
  const std::int64_t dim = x[static_cast<std::size_t>(axis)], count = shape_numel(idx);
  s.set_output(0, t, out);
  const bool i64 = s.inputs[1].dtype == DType::i64;
  const std::string label = s.node.label();
  return
      [outer, inner, dim, count, i64, label](std::span<const TensorView> in, std::span<const TensorView> o) {
        const auto* src = static_cast<const std::byte*>(in[0].data);
        auto* dst = static_cast<std::byte*>(o[0].data);
        for (std::int64_t j = 0; j < count; ++j) {
          std::int64_t k = i64 ? static_cast<const std::int64_t*>(in[1].data)[j]
                               : static_cast<const std::int32_t*>(in[1].data)[j];
          if (k < 0) k += dim;
          if (k < 0 || k >= dim)
            throw Error(label + ": index " + std::to_string(k) + " is out of range [0, " +
                        std::to_string(dim) + ")");
          for (std::int64_t r = 0; r < outer; ++r)
            std::memcpy(dst + (r * count + j) * inner, src + (r * dim + k) * inner,
                        static_cast<std::size_t>(inner));
        }
      };
}

Kernel build_shape(OpSetup& s) {
  s.require_inputs(1, 1);
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  std::int64_t start = s.node.get_int("start", 0), end = s.node.get_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<std::int64_t>(start, 0, rank);
  end = std::clamp<std::int64_t>(end, start, rank);
  const Shape dims(x.begin() + start, x.begin() + end);
  s.set_output(0, DType::i64, {end - start});
  return [dims](std::span<const TensorView>, std::span<const TensorView> o) {
    if (!dims.empty()) std::memcpy(o[0].data, dims.data(), dims.size() * sizeof(std::int64_t));
  };
}

Kernel emit_constant(OpSetup& s, std::shared_ptr<const HostTensor> value) {
  s.set_output(0, value->dtype, value->shape);
  return [value](std::span<const TensorView>, std::span<const TensorView> o) {
    if (!value->bytes.empty()) std::memcpy(o[0].data, value->bytes.data(), value->bytes.size());
  };
}

Kernel build_constant(OpSetup& s) {
  auto make = [](DType t, Shape shape, const void* data) {
    auto h = std::make_shared<HostTensor>(HostTensor::zeros(t, std::move(shape)));
    if (!h->bytes.empty()) std::memcpy(h->bytes.data(), data, h->bytes.size());
    return h;
  };
  const auto& a = s.node.attributes;
  if (a.count("value") && a.at("value").t) return emit_constant(s, a.at("value").t);
  if (a.count("value_float")) return emit_constant(s, make(DType::f32, {}, &a.at("value_float").f));
  if (a.count("value_int")) return emit_constant(s, make(DType::i64, {}, &a.at("value_int").i));
  if (a.count("value_floats")) {
    const auto& v = a.at("value_floats").floats;
    return emit_constant(s, make(DType::f32, {static_cast<std::int64_t>(v.size())}, v.data()));
  }
  if (a.count("value_ints")) {
    const auto& v = a.at("value_ints").ints;
    return emit_constant(s, make(DType::i64, {static_cast<std::int64_t>(v.size())}, v.data()));
  }
  s.fail("no supported value attribute (value, value_float(s), value_int(s))");
}

Kernel build_constant_of_shape(OpSetup& s) {
  s.require_inputs(1, 1);
  const std::vector<std::int64_t> shape = s.constant(0, "input").as_int64();
  for (std::int64_t d : shape)
    if (d < 0) s.fail("negative dimension in " + shape_text(shape));
  std::shared_ptr<HostTensor> fill;
  const auto it = s.node.attributes.find("value");
  if (it != s.node.attributes.end() && it->second.t) {
    if (it->second.t->numel() != 1) s.fail("value must hold one element");
    fill = std::make_shared<HostTensor>(*it->second.t);
  } else {
    fill = std::make_shared<HostTensor>(HostTensor::zeros(DType::f32, {1}));
  }
  s.set_output(0, fill->dtype, shape);
  return [fill](std::span<const TensorView>, std::span<const TensorView> o) {
    const std::size_t e = fill->bytes.size();
    const std::int64_t n = shape_numel(*o[0].shape);
    for (std::int64_t i = 0; i < n; ++i)
      std::memcpy(static_cast<std::byte*>(o[0].data) + i * static_cast<std::int64_t>(e), fill->bytes.data(),
                  e);
  };
}

// Pad: constant, edge or reflect padding (negative pads crop). PyTorch emits it before every
// average pooling that counts padding, with all-zero pads more often than not.
Kernel build_pad(OpSetup& s) {
  s.require_inputs(1, 4);
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  std::vector<std::int64_t> pads =
      s.count() >= 2 && s.has(1) ? s.constant(1, "pads").as_int64() : s.node.get_ints("pads");
  if (s.has(3)) {  // opset 18's axes: pads only for these axes
    const auto axes = s.constant(3, "axes").as_int64();
    if (pads.size() != 2 * axes.size()) s.fail("pads must hold two entries per axis");
    std::vector<std::int64_t> full(static_cast<std::size_t>(2 * rank), 0);
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const auto a = static_cast<std::size_t>(normalize_axis(s, axes[i], rank, "axes"));
      full[a] = pads[i];
      full[a + static_cast<std::size_t>(rank)] = pads[i + axes.size()];
    }
    pads = full;
  }
  if (pads.size() != static_cast<std::size_t>(2 * rank))
    s.fail("pads has " + std::to_string(pads.size()) + " entries, expected " + std::to_string(2 * rank));
  const std::string mode = s.node.get_string("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    s.fail("mode '" + mode + "' is not constant, edge or reflect");
  Shape out = x;
  for (std::int64_t d = 0; d < rank; ++d) {
    out[static_cast<std::size_t>(d)] +=
        pads[static_cast<std::size_t>(d)] + pads[static_cast<std::size_t>(d + rank)];
    if (out[static_cast<std::size_t>(d)] < 0)
      s.fail("pads " + shape_text(pads) + " crop more than input " + shape_text(x) + " holds");
    if (mode != "constant" && x[static_cast<std::size_t>(d)] == 0 && out[static_cast<std::size_t>(d)] > 0)
      s.fail("cannot " + mode + "-pad an empty axis");
    if (mode == "reflect" && (pads[static_cast<std::size_t>(d)] >= x[static_cast<std::size_t>(d)] ||
                              pads[static_cast<std::size_t>(d + rank)] >= x[static_cast<std::size_t>(d)]))
      s.fail("reflect pads must be smaller than the axis they pad");
  }
  const DType t = s.inputs[0].dtype;
  std::vector<std::byte> fill(dtype_size(t), std::byte{0});
  if (s.has(2)) {
    const HostTensor& v = s.constant(2, "constant_value");
    if (v.dtype != t || v.numel() != 1) s.fail("constant_value must be one element of the input's type");
    std::memcpy(fill.data(), v.bytes.data(), fill.size());
  } else if (s.node.has("value") && t == DType::f32) {
    const float v = s.node.get_float("value", 0.0f);
    std::memcpy(fill.data(), &v, 4);
  }
  s.set_output(0, t, out);
  // Source offset of every output element (-1: the fill value), computed once.
  const auto in_strides = contiguous_strides(x);
  auto map = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(shape_numel(out)));
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  for (std::size_t i = 0; i < map->size(); ++i) {
    std::int64_t off = 0;
    bool inside = true;
    for (std::int64_t d = 0; d < rank; ++d) {
      const auto du = static_cast<std::size_t>(d);
      std::int64_t j = index[du] - pads[du];
      const std::int64_t n = x[du];
      if (j < 0 || j >= n) {
        if (mode == "constant")
          inside = false;
        else if (mode == "edge")
          j = j < 0 ? 0 : n - 1;
        else
          j = j < 0 ? -j : 2 * (n - 1) - j;
      }
      off += j * in_strides[du];
    }
    (*map)[i] = inside ? off : -1;
    for (std::int64_t d = rank - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < out[static_cast<std::size_t>(d)]) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return [map, fill](std::span<const TensorView> in, std::span<const TensorView> o) {
    const std::size_t e = fill.size();
    const auto* src = static_cast<const std::byte*>(in[0].data);
    auto* dst = static_cast<std::byte*>(o[0].data);
    for (std::size_t i = 0; i < map->size(); ++i)
      std::memcpy(dst + i * e, (*map)[i] < 0 ? fill.data() : src + (*map)[i] * static_cast<std::int64_t>(e),
                  e);
  };
}

// cpudl.Reorder (inserted by assign_layouts): the same logical N x C x H x W value converted
// between NCHW, NHWC and oneDNN's blocked nChw<b>c (onednn::ActivationLayout codes 0, 1, 2).
// Each layout is described by the strides of the logical (n, c, h, w) index, with the channel
// split into (block, lane) so that blocked fits the same form; the copy walks the destination.
Kernel build_reorder(OpSetup& s) {
  s.require_inputs(1, 1);
  const Shape& x = s.shape(0);
  if (x.size() != 4) s.fail("internal: reorder of a non-4-D value");
  const std::int64_t from = s.node.get_int("from", 0), to = s.node.get_int("to", 0);
  const std::int64_t n = x[0], c = x[1], h = x[2], w = x[3];
  const std::int64_t b = (from == 2 || to == 2) ? onednn::blocked_layout_channels() : 1;
  if (c % b != 0) s.fail("internal: blocked layout of " + std::to_string(c) + " channels");
  // Strides of (n, channel block, h, w, lane) in each layout.
  auto strides = [&](std::int64_t layout) -> std::vector<std::int64_t> {
    switch (layout) {
      case 1:
        return {h * w * c, b, w * c, c, 1};  // NHWC
      case 2:
        return {c * h * w, h * w * b, w * b, b, 1};  // nChw<b>c
      default:
        return {c * h * w, b * h * w, w, 1, h * w};  // NCHW
    }
  };
  const auto src = strides(from), dst = strides(to);
  // Destination order: dims sorted by the destination's strides, outermost first.
  std::vector<std::size_t> order = {0, 1, 2, 3, 4};
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t z) { return dst[a] > dst[z]; });
  const std::int64_t dims[5] = {n, c / b, h, w, b};
  Shape out_dims;
  std::vector<std::int64_t> in_strides;
  for (std::size_t d : order) {
    out_dims.push_back(dims[d]);
    in_strides.push_back(src[d]);
  }
  auto copy = std::make_shared<StridedCopy>(out_dims, in_strides, 0, 4);
  s.set_output(0, s.inputs[0].dtype, x);
  return [copy](std::span<const TensorView> in, std::span<const TensorView> o) {
    copy->run(in[0].data, o[0].data);
  };
}

const OpEntry kOps[] = {
    {kReorderOp, build_reorder},
    {"Pad", build_pad},
    {"Identity", build_identity},
    {"Dropout", build_identity},
    {"Reshape", build_reshape},
    {"Flatten", build_flatten},
    {"Squeeze", build_squeeze},
    {"Unsqueeze", build_unsqueeze},
    {"Transpose", build_transpose},
    {"Expand", build_expand},
    {"Tile", build_tile},
    {"Range", build_range},
    {"Slice", build_slice},
    {"Concat", build_concat},
    {"Split", build_split},
    {"Gather", build_gather},
    {"Shape", build_shape},
    {"Constant", build_constant},
    {"ConstantOfShape", build_constant_of_shape},
};

}  // namespace

std::span<const OpEntry> shape_ops() { return kOps; }

}  // namespace cpudl::infer
