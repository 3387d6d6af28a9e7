// Views: new shape and strides over the same storage, each differentiable. Also broadcasting
// and strided copies.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "cpudl/autograd.h"
#include "cpudl/ops.h"
#include "runtime/parallel.h"
#include "tensor/layout.h"
#include "tensor/strided.h"

namespace cpudl {

namespace {

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

// Strides for `shape` over a view with (old_shape, old_strides), or nullopt when the elements
// are not laid out compatibly (PyTorch's computeStride).
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

}  // namespace

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

Tensor Tensor::view(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), this->shape());
  const auto strides = view_strides(this->shape(), this->strides(), shape);
  if (!strides)
    throw Error("view " + shape_text(requested) + " of a non-contiguous tensor of shape " +
                shape_text(this->shape()) + ": use reshape()");
  Tensor out = make_view(*this, shape, *strides, offset());
  const Shape input_shape = this->shape();
  autograd::record(out, "view", {*this},
                   [input_shape](const Tensor& g) { return std::vector<Tensor>{g.reshape(input_shape)}; });
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), this->shape());
  if (view_strides(this->shape(), this->strides(), shape)) return view(shape);
  return clone().view(shape);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  const std::int64_t nd = dim();
  if (static_cast<std::int64_t>(dims.size()) != nd)
    throw Error("permute of a " + std::to_string(nd) + "-dim tensor with " + std::to_string(dims.size()) +
                " dims");
  Shape shape(dims.size()), strides(dims.size());
  std::vector<std::int64_t> inverse(dims.size(), -1);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = normalize_dim(dims[i], nd);
    if (inverse[static_cast<std::size_t>(d)] != -1)
      throw Error("permute: dimension " + std::to_string(d) + " repeated");
    inverse[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(i);
    shape[i] = this->shape()[static_cast<std::size_t>(d)];
    strides[i] = this->strides()[static_cast<std::size_t>(d)];
  }
  Tensor out = make_view(*this, shape, strides, offset());
  autograd::record(out, "permute", {*this},
                   [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
  return out;
}

Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const {
  std::vector<std::int64_t> dims(static_cast<std::size_t>(dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<std::size_t>(normalize_dim(a, dim()))],
            dims[static_cast<std::size_t>(normalize_dim(b, dim()))]);
  return permute(dims);
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step) const {
  const std::int64_t nd = normalize_dim(d, dim());
  const std::int64_t size = shape()[static_cast<std::size_t>(nd)];
  if (step < 1) throw Error("slice: step must be positive");
  start = std::clamp(start < 0 ? start + size : start, std::int64_t{0}, size);
  end = std::clamp(end < 0 ? end + size : end, start, size);
  Shape shape = this->shape(), strides = this->strides();
  shape[static_cast<std::size_t>(nd)] = (end - start + step - 1) / step;
  strides[static_cast<std::size_t>(nd)] *= step;
  Tensor out =
      make_view(*this, shape, strides, offset() + start * this->strides()[static_cast<std::size_t>(nd)]);
  const Shape input_shape = this->shape();
  autograd::record(out, "slice", {*this}, [input_shape, nd, start, end, step](const Tensor& g) {
    Tensor full = Tensor::zeros(input_shape);
    copy_strided(g.contiguous(), full.slice(nd, start, end, step));
    return std::vector<Tensor>{full};
  });
  return out;
}

Tensor Tensor::expand(const Shape& target) const {
  const Shape& shape = this->shape();
  if (target.size() < shape.size())
    throw Error("expand " + shape_text(shape) + " to " + shape_text(target) + ": fewer dimensions");
  Shape strides(target.size(), 0);
  Shape out_shape = target;
  const std::size_t lead = target.size() - shape.size();
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      if (target[i] < 0) throw Error("expand: -1 in a new leading dimension");
      continue;
    }
    const std::int64_t have = shape[i - lead];
    if (target[i] == -1 || target[i] == have) {
      out_shape[i] = have;
      strides[i] = this->strides()[i - lead];
    } else if (have == 1) {
      strides[i] = 0;
    } else {
      throw Error("expand " + shape_text(shape) + " to " + shape_text(target) + ": dimension " +
                  std::to_string(i) + " has size " + std::to_string(have) + ", not 1");
    }
  }
  Tensor out = make_view(*this, out_shape, strides, offset());
  autograd::record(out, "expand", {*this},
                   [shape](const Tensor& g) { return std::vector<Tensor>{sum_to(g, shape)}; });
  return out;
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  const std::int64_t nd = normalize_dim(d, dim() + 1);
  Shape shape = this->shape();
  shape.insert(shape.begin() + nd, 1);
  return view(shape);
}

Tensor Tensor::squeeze(std::int64_t d) const {
  const std::int64_t nd = normalize_dim(d, dim());
  if (shape()[static_cast<std::size_t>(nd)] != 1) return *this;
  Shape shape = this->shape();
  shape.erase(shape.begin() + nd);
  return reshape(shape);
}

Tensor Tensor::flatten(std::int64_t start_dim, std::int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const std::int64_t s = normalize_dim(start_dim, dim()), e = normalize_dim(end_dim, dim());
  if (s > e) throw Error("flatten: start_dim after end_dim");
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  std::int64_t merged = 1;
  for (std::int64_t i = s; i <= e; ++i) merged *= this->shape()[static_cast<std::size_t>(i)];
  shape.push_back(merged);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

}  // namespace cpudl
