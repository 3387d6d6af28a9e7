// Index-driven data movement of detectors' post-processing: GatherND, ScatterElements, ScatterND.
// Indices are data (often from NonZero or TopK): each is checked against its dimension, and a
// negative one counts from the end, as ONNX specifies.
#include <cstring>

#include "infer/op_registry.h"

namespace cpudl::infer {
namespace {

std::int64_t read_index(const TensorView& v, std::int64_t i) {
  return v.dtype == DType::i64 ? static_cast<const std::int64_t*>(v.data)[i]
                               : static_cast<const std::int32_t*>(v.data)[i];
}

void require_indices(const OpSetup& s, std::size_t i) {
  if (s.inputs[i].dtype != DType::i64 && s.inputs[i].dtype != DType::i32)
    s.fail("indices must be INT64 or INT32");
}

std::int64_t checked(const std::string& label, std::int64_t index, std::int64_t dim) {
  if (index < 0) index += dim;
  if (index < 0 || index >= dim)
    throw Error(label + ": index " + std::to_string(index) + " is out of range [0, " + std::to_string(dim) +
                ")");
  return index;
}

// GatherND: indices [..., k] address the first k dimensions after batch_dims; the output is
// indices' leading shape followed by the addressed slices' shape.
Kernel build_gather_nd(OpSetup& s) {
  s.require_inputs(2, 2);
  require_indices(s, 1);
  const Shape& d = s.shape(0);
  const Shape& idx = s.shape(1);
  const auto b = static_cast<std::size_t>(s.node.get_int("batch_dims", 0));
  if (idx.empty() || idx.size() <= b || d.size() < b)
    s.fail("indices " + shape_text(idx) + " and batch_dims disagree");
  const auto k = static_cast<std::size_t>(idx.back());
  if (b + k > d.size())
    s.fail("indices address " + std::to_string(k) + " dimensions of data " + shape_text(d));
  for (std::size_t i = 0; i < b; ++i)
    if (d[i] != idx[i]) s.fail("batch dimension " + std::to_string(i) + " differs between data and indices");
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), d.begin() + static_cast<std::ptrdiff_t>(b + k), d.end());
  s.set_output(0, s.inputs[0].dtype, out);
  std::int64_t batches = 1, per_batch = 1, slice = static_cast<std::int64_t>(dtype_size(s.inputs[0].dtype));
  for (std::size_t i = 0; i < b; ++i) batches *= d[i];
  for (std::size_t i = b; i + 1 < idx.size(); ++i) per_batch *= idx[i];
  for (std::size_t i = b + k; i < d.size(); ++i) slice *= d[i];
  std::vector<std::int64_t> dims(d.begin() + static_cast<std::ptrdiff_t>(b),
                                 d.begin() + static_cast<std::ptrdiff_t>(b + k)),
      strides(k, slice);
  for (std::size_t t = k; t-- > 1;) strides[t - 1] = strides[t] * dims[t];
  const std::int64_t batch_bytes = k > 0 ? strides[0] * dims[0] : slice;
  const std::string label = s.node.label();
  return [=](std::span<const TensorView> in, std::span<const TensorView> o) {
    const auto* src = static_cast<const std::byte*>(in[0].data);
    auto* dst = static_cast<std::byte*>(o[0].data);
    for (std::int64_t bi = 0; bi < batches; ++bi)
      for (std::int64_t j = 0; j < per_batch; ++j) {
        std::int64_t at = bi * batch_bytes;
        const std::int64_t row = (bi * per_batch + j) * static_cast<std::int64_t>(k);
        for (std::size_t t = 0; t < k; ++t)
          at += checked(label, read_index(in[1], row + static_cast<std::int64_t>(t)), dims[t]) * strides[t];
        std::memcpy(dst + (bi * per_batch + j) * slice, src + at, static_cast<std::size_t>(slice));
      }
  };
}

enum class Reduction { none, add, mul };

Reduction reduction_of(const OpSetup& s) {
  const std::string r = s.node.get_string("reduction", "none");
  if (r == "none") return Reduction::none;
  if (r == "add") return Reduction::add;
  if (r == "mul") return Reduction::mul;
  s.fail("reduction '" + r + "' is not supported (none, add, mul are)");
}

template <class T>
void combine(T& target, T value, Reduction r) {
  if (r == Reduction::add)
    target = static_cast<T>(target + value);
  else if (r == Reduction::mul)
    target = static_cast<T>(target * value);
  else
    target = value;
}

// Visits every element of T-typed values through `fn(T* out, const T* updates)`.
template <class Fn>
void by_type(DType t, Fn fn) {
  if (t == DType::f32)
    fn(float{});
  else if (t == DType::i64)
    fn(std::int64_t{});
  else if (t == DType::i32)
    fn(std::int32_t{});
  else
    fn(std::int8_t{});
}

// Data, indices and updates of a scatter: data and updates of one supported type.
void require_scatter_inputs(const OpSetup& s) {
  s.require_inputs(3, 3);
  require_indices(s, 1);
  const DType t = s.inputs[0].dtype;
  if (t != DType::f32 && t != DType::i64 && t != DType::i32 && t != DType::i8)
    s.fail("element type " + std::string(dtype_name(t)) +
           " is not supported (FLOAT, INT64, INT32, BOOL are)");
  if (s.inputs[2].dtype != t) s.fail("updates and data have different element types");
}

// ScatterElements: out = data; out[... indices[p] (on axis) ...] (op)= updates[p].
Kernel build_scatter_elements(OpSetup& s) {
  require_scatter_inputs(s);
  const Shape& d = s.shape(0);
  const Shape& idx = s.shape(1);
  const DType t = s.inputs[0].dtype;
  if (s.shape(2) != idx || idx.size() != d.size())
    s.fail("indices and updates must have one shape, of data's rank");
  const auto axis = static_cast<std::size_t>(
      normalize_axis(s, s.node.get_int("axis", 0), static_cast<std::int64_t>(d.size()), "axis"));
  const Reduction r = reduction_of(s);
  s.set_output(0, t, d);
  const std::string label = s.node.label();
  const Shape data = d, index_shape = idx;
  return [=](std::span<const TensorView> in, std::span<const TensorView> o) {
    by_type(t, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = shape_numel(data), m = shape_numel(index_shape);
      T* out = static_cast<T*>(o[0].data);
      if (out != in[0].data && n > 0) std::memcpy(out, in[0].data, static_cast<std::size_t>(n) * sizeof(T));
      std::vector<std::int64_t> pos(index_shape.size(), 0);
      for (std::int64_t e = 0; e < m; ++e) {
        std::int64_t at = 0;
        for (std::size_t dd = 0; dd < data.size(); ++dd) {
          const std::int64_t coordinate =
              dd == axis ? checked(label, read_index(in[1], e), data[dd]) : pos[dd];
          at = at * data[dd] + coordinate;
        }
        combine(out[at], static_cast<const T*>(in[2].data)[e], r);
        for (std::size_t dd = pos.size(); dd-- > 0;) {
          if (++pos[dd] < index_shape[dd]) break;
          pos[dd] = 0;
        }
      }
    });
  };
}

// ScatterND: out = data; for each index tuple of indices [..., k], the addressed slice of out
// (op)= the matching slice of updates.
Kernel build_scatter_nd(OpSetup& s) {
  require_scatter_inputs(s);
  const Shape& d = s.shape(0);
  const Shape& idx = s.shape(1);
  const DType t = s.inputs[0].dtype;
  if (idx.empty()) s.fail("indices must have rank 1 or more");
  const auto k = static_cast<std::size_t>(idx.back());
  if (k > d.size()) s.fail("indices address " + std::to_string(k) + " dimensions of data " + shape_text(d));
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), d.begin() + static_cast<std::ptrdiff_t>(k), d.end());
  if (s.shape(2) != want)
    s.fail("updates have shape " + shape_text(s.shape(2)) + ", expected " + shape_text(want));
  const Reduction r = reduction_of(s);
  s.set_output(0, t, d);
  std::int64_t slice = 1, tuples = 1;
  for (std::size_t i = k; i < d.size(); ++i) slice *= d[i];
  for (std::size_t i = 0; i + 1 < idx.size(); ++i) tuples *= idx[i];
  std::vector<std::int64_t> dims(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(k)), strides(k, slice);
  for (std::size_t i = k; i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  const std::int64_t n = shape_numel(d);
  const std::string label = s.node.label();
  return [=](std::span<const TensorView> in, std::span<const TensorView> o) {
    by_type(t, [&](auto tag) {
      using T = decltype(tag);
      T* out = static_cast<T*>(o[0].data);
      if (out != in[0].data && n > 0) std::memcpy(out, in[0].data, static_cast<std::size_t>(n) * sizeof(T));
      const T* updates = static_cast<const T*>(in[2].data);
      for (std::int64_t j = 0; j < tuples; ++j) {
        std::int64_t at = 0;
        for (std::size_t i = 0; i < k; ++i)
          at += checked(label,
                        read_index(in[1], j * static_cast<std::int64_t>(k) + static_cast<std::int64_t>(i)),
                        dims[i]) *
                strides[i];
        for (std::int64_t e = 0; e < slice; ++e) combine(out[at + e], updates[j * slice + e], r);
      }
    });
  };
}

const OpEntry kOps[] = {
    {"GatherND", build_gather_nd},
    {"ScatterElements", build_scatter_elements},
    {"ScatterND", build_scatter_nd},
};

}  // namespace

std::span<const OpEntry> indexing_ops() { return kOps; }

}  // namespace cpudl::infer
