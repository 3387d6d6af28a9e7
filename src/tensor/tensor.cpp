// Tensor construction, properties, element access and printing (the views and copies that
// record autograd nodes are ops: src/ops/tensor_views.cpp).
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "cpudl/error.h"
#include "cpudl/tensor.h"
#include "tensor/strided.h"

namespace cpudl {

namespace {
Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<std::int64_t>(shape[i], 1);
  }
  return strides;
}

const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  if (!impl) throw Error("use of an undefined tensor");
  return *impl;
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw_data(), 0, static_cast<std::size_t>(t.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  std::fill(t.data(), t.data() + t.numel(), value);
  return t;
}

Tensor Tensor::ones(const Shape& shape) { return full(shape, 1.0f); }
Tensor Tensor::scalar(float value) { return full({}, value); }

Tensor Tensor::arange(float start, float end, float step) {
  if (step == 0 || (end - start) / step < 0) throw Error("arange: step must move from start towards end");
  const auto n = static_cast<std::int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({n});
  for (std::int64_t i = 0; i < n; ++i) t.data()[i] = start + step * static_cast<float>(i);
  return t;
}

Tensor Tensor::rand(const Shape& shape, Generator& gen) {
  Tensor t = empty(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = gen.uniform();
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen) {
  Tensor t = empty(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = gen.normal();
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape))
    throw Error("from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                shape_text(shape));
  Tensor t = empty(shape);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

Tensor Tensor::from_buffer(const void* data, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memcpy(t.raw_data(), data, static_cast<std::size_t>(t.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype,
                            const Shape& strides, std::int64_t offset) {
  if (!storage) throw Error("from_storage: no storage");
  const Shape steps = strides.empty() ? contiguous_strides(shape) : strides;
  if (steps.size() != shape.size())
    throw Error("from_storage: " + std::to_string(steps.size()) + " strides for " +
                std::to_string(shape.size()) + " dimensions");
  std::int64_t last = offset;  // the highest element index the view reaches
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || steps[d] < 0)
      throw Error("from_storage: negative size or stride in dimension " + std::to_string(d));
    if (shape[d] == 0) last = offset - 1;
    if (last < offset) break;
    last += (shape[d] - 1) * steps[d];
  }
  const auto elements = static_cast<std::int64_t>(storage->bytes() / dtype_size(dtype));
  if (offset < 0 || last >= elements)
    throw Error("from_storage: a view of " + shape_text(shape) + " reaches element " + std::to_string(last) +
                " of a storage of " + std::to_string(elements));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = steps;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(impl);
}

const Shape& Tensor::shape() const { return checked(impl_).shape; }
const Shape& Tensor::strides() const { return checked(impl_).strides; }
std::int64_t Tensor::dim() const { return static_cast<std::int64_t>(shape().size()); }
std::int64_t Tensor::numel() const { return shape_numel(shape()); }
DType Tensor::dtype() const { return checked(impl_).dtype; }
std::int64_t Tensor::offset() const { return checked(impl_).offset; }

std::int64_t Tensor::size(std::int64_t d) const {
  return shape()[static_cast<std::size_t>(normalize_dim(d, dim()))];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked(impl_);
  std::int64_t expected = 1;
  for (std::size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = checked(impl_);
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<std::int64_t>(dtype_size(t.dtype));
}

float* Tensor::data() const {
  if (dtype() != DType::f32)
    throw Error("tensor of dtype " + std::string(dtype_name(dtype())) + " where f32 was expected");
  return static_cast<float*>(raw_data());
}

std::vector<float> Tensor::to_vector() const {
  const Tensor c = contiguous();
  return std::vector<float>(c.data(), c.data() + c.numel());
}

namespace {
std::int64_t element_offset(const TensorImpl& t, std::initializer_list<std::int64_t> index) {
  if (index.size() != t.shape.size())
    throw Error("index of " + std::to_string(index.size()) + " dims into a tensor of shape " +
                shape_text(t.shape));
  std::int64_t off = 0;
  std::size_t d = 0;
  for (std::int64_t i : index) {
    if (i < 0 || i >= t.shape[d])
      throw Error("index " + std::to_string(i) + " out of range for dim " + std::to_string(d) + " of shape " +
                  shape_text(t.shape));
    off += i * t.strides[d++];
  }
  return off;
}
}  // namespace

float Tensor::at(std::initializer_list<std::int64_t> index) const {
  return data()[element_offset(*impl_, index)];
}
void Tensor::set(std::initializer_list<std::int64_t> index, float value) {
  data()[element_offset(*impl_, index)] = value;
  bump_version();
}

float Tensor::item() const {
  if (numel() != 1)
    throw Error("item() of a tensor of shape " + shape_text(shape()) + " (one element expected)");
  return contiguous().data()[0];
}

bool Tensor::requires_grad() const { return checked(impl_).requires_grad; }
Tensor& Tensor::set_requires_grad(bool on) {
  if (on && dtype() != DType::f32) throw Error("only f32 tensors can require gradients");
  if (!on && impl_->grad_fn) throw Error("set_requires_grad(false) on a non-leaf tensor: use detach()");
  impl_->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return checked(impl_).grad ? Tensor(impl_->grad) : Tensor(); }
void Tensor::set_grad(const Tensor& g) const {
  checked(impl_);
  impl_->grad = g.impl();
}
void Tensor::zero_grad() const {
  checked(impl_);
  impl_->grad.reset();
}
bool Tensor::is_leaf() const { return checked(impl_).grad_fn == nullptr; }
std::shared_ptr<Node> Tensor::grad_fn() const { return checked(impl_).grad_fn; }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(checked(impl_));
  impl->requires_grad = false;
  impl->grad.reset();
  impl->grad_fn.reset();
  impl->grad_accumulator.reset();
  return Tensor(impl);
}

std::uint64_t fresh_tensor_version() {
  static std::atomic<std::uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

void Tensor::bump_version() const { *checked(impl_).version = fresh_tensor_version(); }
std::uint64_t Tensor::version() const { return *checked(impl_).version; }

std::string Tensor::to_string() const {
  std::ostringstream out;
  out << *this;
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  if (!t.defined()) return out << "tensor(undefined)";
  const std::vector<float> values = t.dtype() == DType::f32 ? t.to_vector() : std::vector<float>{};
  out << "tensor(";
  const Shape& shape = t.shape();
  // Nested brackets, at most 6 values per innermost row and 6 rows per level.
  std::function<void(std::size_t, std::int64_t)> print = [&](std::size_t d, std::int64_t base) {
    if (d == shape.size()) {
      out << std::setprecision(6) << values[static_cast<std::size_t>(base)];
      return;
    }
    std::int64_t inner = 1;
    for (std::size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
    out << "[";
    for (std::int64_t i = 0; i < shape[d]; ++i) {
      if (shape[d] > 6 && i == 3) {
        out << "..., ";
        i = shape[d] - 3;
      }
      print(d + 1, base + i * inner);
      if (i + 1 < shape[d]) out << ", ";
    }
    out << "]";
  };
  if (!values.empty() || t.numel() == 0) {
    if (t.numel() > 0) print(0, 0);
  } else {
    out << "<" << dtype_name(t.dtype()) << " data>";
  }
  out << ", shape=" << shape_text(shape);
  if (t.dtype() != DType::f32) out << ", dtype=" << dtype_name(t.dtype());
  if (t.requires_grad()) out << ", requires_grad=true";
  return out << ")";
}

}  // namespace cpudl
