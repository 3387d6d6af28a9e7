// Helpers for walking strided views: dim normalisation, broadcasting shapes, and copies between
// any two layouts of the same shape. Internal to the tensor and op code.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cpudl/error.h"
#include "cpudl/tensor.h"

namespace cpudl {

inline std::int64_t normalize_dim(std::int64_t dim, std::int64_t ndim) {
  const std::int64_t d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= std::max<std::int64_t>(ndim, 1))
    throw Error("dimension " + std::to_string(dim) + " out of range for a tensor of " + std::to_string(ndim) +
                " dims");
  return d;
}

// A view of `base`'s storage with this shape, strides and offset (no autograd node).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, std::int64_t offset);
// Strides for `shape` over a view with (old_shape, old_strides), or nullopt when the elements are
// not laid out compatibly (PyTorch's computeStride).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape);
// `requested` with its one -1 resolved for `numel` elements; throws naming `from` when it cannot be.
Shape infer_shape(const Shape& requested, std::int64_t numel, const Shape& from);

// NumPy/PyTorch broadcasting; throws naming `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Copies src into dst (same shape, any strides, same dtype).
void copy_strided(const Tensor& src, const Tensor& dst);

// Calls fn(offset_a, offset_b, offset_out, inner) for the innermost rows [begin, end) of a
// broadcast element-wise op: a and b are views already expanded to out's shape; `inner` is the
// length of the last dimension, whose strides are (stride_a, stride_b, 1). Rows are numbered in
// row-major order of the outer dimensions, so threads can take disjoint ranges.
template <class Fn>
void for_rows(const Shape& shape, const Shape& stride_a, const Shape& stride_b, std::int64_t begin,
              std::int64_t end, Fn fn) {
  const std::size_t nd = shape.size();
  if (nd == 0) {
    if (begin < end) fn(0, 0, 0, 1);
    return;
  }
  if (begin >= end) return;
  const std::int64_t inner = shape[nd - 1];
  std::vector<std::int64_t> index(nd, 0);
  std::int64_t oa = 0, ob = 0;
  for (std::size_t d = nd - 1, r = static_cast<std::size_t>(begin); d-- > 0;) {  // row `begin`'s index
    index[d] = static_cast<std::int64_t>(r) % shape[d];
    r /= static_cast<std::size_t>(shape[d]);
    oa += index[d] * stride_a[d];
    ob += index[d] * stride_b[d];
  }
  for (std::int64_t r = begin; r < end; ++r) {
    fn(oa, ob, r * inner, inner);
    for (std::size_t d = nd - 1; d-- > 0;) {  // odometer over the outer dims
      if (++index[d] < shape[d]) {
        oa += stride_a[d];
        ob += stride_b[d];
        break;
      }
      oa -= stride_a[d] * (shape[d] - 1);
      ob -= stride_b[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

// Every innermost row, in order.
template <class Fn>
void for_each_row(const Shape& shape, const Shape& stride_a, const Shape& stride_b, Fn fn) {
  std::int64_t rows = 1;
  for (std::size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  for_rows(shape, stride_a, stride_b, 0, rows, fn);
}

}  // namespace cpudl
