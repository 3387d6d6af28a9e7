// Dense layouts: detection, layout-preserving allocation and the row-major <-> channels-last
// conversion (tensor/layout.h).
#include "tensor/layout.h"

#include <algorithm>
#include <cstring>

#include "kernels/dispatch.h"
#include "runtime/parallel.h"
#include "tensor/strided.h"

namespace cpudl {

namespace {

Tensor with_strides(const Shape& shape, const Shape& strides, DType dtype) {
  const Tensor flat = Tensor::empty({shape_numel(shape)}, dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = flat.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  return Tensor(impl);
}

Shape channels_last_strides(const Shape& s) { return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}; }

// Equal strides wherever the size exceeds 1 (other strides never move the address).
bool strides_match(const Shape& shape, const Shape& a, const Shape& b) {
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 1 && a[i] != b[i]) return false;
  return true;
}

}  // namespace

bool is_dense(const Tensor& t) {
  const Shape& shape = t.shape();
  const Shape& strides = t.strides();
  // Called by every element-wise op: the dimensions are sorted on the stack (insertion sort;
  // real tensors have a handful), falling back to the heap only past 8 of them.
  constexpr std::size_t kInline = 8;
  std::size_t inline_dims[kInline];
  std::vector<std::size_t> heap_dims;
  std::size_t* dims = inline_dims;
  if (shape.size() > kInline) {
    heap_dims.resize(shape.size());
    dims = heap_dims.data();
  }
  std::size_t count = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 1) continue;
    std::size_t at = count++;
    for (; at > 0 && strides[dims[at - 1]] < strides[i]; --at) dims[at] = dims[at - 1];
    dims[at] = i;  // dims ordered by decreasing stride
  }
  std::int64_t expected = 1;
  for (std::size_t i = count; i-- > 0;) {
    if (strides[dims[i]] != expected) return false;
    expected *= shape[dims[i]];
  }
  return true;
}

bool same_dense_layout(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && is_dense(a) && strides_match(a.shape(), a.strides(), b.strides());
}

bool is_channels_last(const Tensor& t) {
  return t.dim() == 4 && strides_match(t.shape(), t.strides(), channels_last_strides(t.shape()));
}

Tensor empty_channels_last(const Shape& shape) {
  if (shape.size() != 4) throw Error("channels-last needs a 4-D shape, got " + shape_text(shape));
  return with_strides(shape, channels_last_strides(shape), DType::f32);
}

Tensor empty_like(const Tensor& like) {
  if (like.is_contiguous() || !is_dense(like)) return Tensor::empty(like.shape(), like.dtype());
  return with_strides(like.shape(), like.strides(), like.dtype());
}

Tensor channels_last_values(const Tensor& t) {
  if (is_channels_last(t)) return t;
  Tensor out = empty_channels_last(t.shape());
  copy_strided(t, out);
  return out;
}

Tensor values_in_layout_of(const Tensor& t, const Tensor& like) {
  if (strides_match(t.shape(), t.strides(), like.strides()) && is_dense(t)) return t;
  Tensor out = empty_like(like);
  copy_strided(t, out);
  return out;
}

bool copy_between_channel_layouts(const Tensor& src, const Tensor& dst) {
  if (src.dim() != 4 || src.dtype() != DType::f32 || src.shape() != dst.shape()) return false;
  const bool to_last = src.is_contiguous() && is_channels_last(dst);
  const bool to_first = is_channels_last(src) && dst.is_contiguous();
  if (!to_last && !to_first) return false;
  const std::size_t n = static_cast<std::size_t>(src.size(0)), c = static_cast<std::size_t>(src.size(1)),
                    hw = static_cast<std::size_t>(src.size(2) * src.size(3));
  // Each image is a [rows x cols] matrix transposed: [C x HW] to [HW x C] or back; tasks are
  // bands of 64 source rows so both threads get work on a single image too.
  const std::size_t rows = to_last ? c : hw, cols = to_last ? hw : c;
  constexpr std::size_t kBand = 64;
  const std::size_t bands = (rows + kBand - 1) / kBand;
  const float* s = src.data();
  float* d = dst.data();
  const auto transpose = kernels::kernel_table().f32_transpose.fn;
  parallel_for(n * bands, std::max<std::size_t>(1, (std::size_t{1} << 15) / (kBand * cols)),
               [&](std::size_t begin, std::size_t end) {
                 for (std::size_t task = begin; task < end; ++task) {
                   const std::size_t image = task / bands, r0 = task % bands * kBand;
                   const std::size_t r1 = std::min(rows, r0 + kBand);
                   transpose(s + image * rows * cols + r0 * cols, r1 - r0, cols, cols,
                             d + image * rows * cols + r0, rows);
                 }
               });
  return true;
}

}  // namespace cpudl
