// Strided views and copies: the shape and stride arithmetic of views (no autograd: the
// differentiable view methods of Tensor are ops, src/ops/tensor_views.cpp), broadcasting, and
// copies between any two layouts of the same shape.
#include <algorithm>
#include <cstring>

#include "runtime/parallel.h"
#include "tensor/layout.h"
#include "tensor/strided.h"

namespace cpudl {

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, std::int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  const auto& b = *base.impl();
  impl->storage = b.storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = b.dtype;
  impl->version = b.version;
  return Tensor(impl);
}

std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& shape) {
  if (shape_numel(old_shape) == 0 || old_shape.empty()) return Shape(shape.size(), 1);  // scalars, empties
  Shape strides(shape.size(), 0);
  std::int64_t view_d = static_cast<std::int64_t>(shape.size()) - 1;
  std::int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t d = static_cast<std::int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[static_cast<std::size_t>(d)];
    if (d == 0 || (old_shape[static_cast<std::size_t>(d - 1)] != 1 &&
                   old_strides[static_cast<std::size_t>(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[static_cast<std::size_t>(view_d)] == 1)) {
        strides[static_cast<std::size_t>(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[static_cast<std::size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[static_cast<std::size_t>(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

Shape infer_shape(const Shape& requested, std::int64_t numel, const Shape& from) {
  Shape shape = requested;
  std::int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw Error("view " + shape_text(requested) + ": only one dimension can be -1");
      infer = static_cast<std::int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known > 0 && numel % known == 0) shape[static_cast<std::size_t>(infer)] = numel / known;
  if (shape_numel(shape) != numel)
    throw Error("cannot view a tensor of shape " + shape_text(from) + " (" + std::to_string(numel) +
                " elements) as " + shape_text(requested));
  return shape;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(std::string(op) + ": shapes " + shape_text(a) + " and " + shape_text(b) +
                  " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// Rows of `inner` elements of type T (by size: the copy moves bits), strides in elements: a
// typed loop, a memcpy when both rows are dense, a fill from a broadcast (stride-0) source.
template <class T>
void copy_rows(const Tensor& src, const Tensor& dst) {
  const Shape& shape = src.shape();
  const auto* s = static_cast<const T*>(src.raw_data());
  auto* d = static_cast<T*>(dst.raw_data());
  const std::int64_t inner = shape.empty() ? 1 : shape.back();
  const std::int64_t ss = shape.empty() ? 1 : src.strides().back(),
                     ds = shape.empty() ? 1 : dst.strides().back();
  const std::int64_t rows = inner == 0 ? 0 : shape_numel(shape) / inner;
  // Large copies are split over the threads by rows, in chunks of at least ~64K elements.
  const auto grain = static_cast<std::size_t>(std::max<std::int64_t>(1, (std::int64_t{1} << 16) / inner));
  parallel_for(static_cast<std::size_t>(rows), grain, [&](std::size_t r0, std::size_t r1) {
    for_rows(shape, src.strides(), dst.strides(), static_cast<std::int64_t>(r0),
             static_cast<std::int64_t>(r1),
             [&](std::int64_t os, std::int64_t od, std::int64_t, std::int64_t n) {
               const T* from = s + os;
               T* to = d + od;
               if (ss == 1 && ds == 1) {
                 std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(T));
               } else if (ss == 0) {
                 for (std::int64_t i = 0; i < n; ++i) to[i * ds] = *from;
               } else {
                 for (std::int64_t i = 0; i < n; ++i) to[i * ds] = from[i * ss];
               }
             });
  });
}

}  // namespace

void copy_strided(const Tensor& src, const Tensor& dst) {
  if (src.shape() != dst.shape())
    throw Error("copy: shape " + shape_text(src.shape()) + " into " + shape_text(dst.shape()));
  if (src.dtype() != dst.dtype()) throw Error("copy: dtype mismatch");
  const std::size_t es = dtype_size(src.dtype());
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), static_cast<std::size_t>(src.numel()) * es);
    return;
  }
  if (shape_numel(src.shape()) == 0) return;
  if (copy_between_channel_layouts(src, dst)) return;
  switch (es) {
    case 1:
      return copy_rows<std::uint8_t>(src, dst);
    case 2:
      return copy_rows<std::uint16_t>(src, dst);
    case 4:
      return copy_rows<std::uint32_t>(src, dst);
    case 8:
      return copy_rows<std::uint64_t>(src, dst);
    default:
      throw Error("copy: unsupported element size " + std::to_string(es));
  }
}

}  // namespace cpudl
