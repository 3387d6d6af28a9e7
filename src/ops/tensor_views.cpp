// The view methods of Tensor (view, reshape, permute, slice, expand, ...) and its copies (clone,
// contiguous): new shape and strides over the same storage, each differentiable, so each records
// its autograd node here, in the ops layer. The stride arithmetic is the tensor layer's
// (tensor/strided.h).
#include <algorithm>
#include <numeric>

#include "cpudl/autograd.h"
#include "cpudl/ops.h"
#include "runtime/op_profile.h"
#include "tensor/strided.h"

namespace cpudl {

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

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  profiling::Scope profile(
      "copy");  // reshape of a non-viewable layout (flatten of channels-last), contiguous()
  Tensor out = empty(shape(), dtype());
  copy_strided(*this, out);
  Tensor self = *this;
  autograd::record(out, "clone", {self}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

}  // namespace cpudl
