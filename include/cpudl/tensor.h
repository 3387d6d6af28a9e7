// cpudl's Tensor: an n-dimensional view (shape, strides, offset) of 64-byte-aligned storage that
// views share, with PyTorch-style autograd metadata. Computation is f32; bf16, int8 and int32
// storage exist for quantisation and labels.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cpudl {

enum class DType : std::uint8_t { f32, bf16, i8, i32, i64, u8 };
std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

using Shape = std::vector<std::int64_t>;
std::string shape_text(const Shape& shape);  // "[2, 3, 4]"; a free dimension (-1) as "?"
std::int64_t shape_numel(const Shape& shape);

// Owns one 64-byte aligned allocation; views keep it alive through shared_ptr. Or borrows memory
// another library owns (a NumPy array, a DLPack tensor): `owner` keeps that memory alive and is
// released with the storage, which then frees nothing itself.
class Storage {
 public:
  explicit Storage(std::size_t bytes);
  Storage(void* borrowed, std::size_t bytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::shared_ptr<void> owner_;  // set for borrowed memory
};

// A seeded random source (Mersenne Twister), as torch.Generator.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : state_(seed) {}
  std::uint64_t next_u64();
  float uniform();  // [0, 1)
  float normal();   // N(0, 1), Box-Muller
  void seed(std::uint64_t seed) { state_ = seed; }
  std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;  // splitmix64: tiny state that checkpoints can save exactly
};
Generator& default_generator();
void manual_seed(std::uint64_t seed);

class Node;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (f32 unless a dtype is given)
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape);
  static Tensor full(const Shape& shape, float value);
  static Tensor arange(float start, float end, float step = 1.0f);
  static Tensor rand(const Shape& shape, Generator& gen = default_generator());
  static Tensor randn(const Shape& shape, Generator& gen = default_generator());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor from_buffer(const void* data, const Shape& shape, DType dtype);  // copies
  static Tensor scalar(float value);
  // A view of `storage` (no copy) with `strides` in elements (empty: contiguous) from element
  // `offset`. Error on a negative stride or a view that would reach past the storage.
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype,
                             const Shape& strides = {}, std::int64_t offset = 0);

  // ---- properties
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;
  std::int64_t size(std::int64_t dim) const;  // negative dims count from the end
  std::int64_t dim() const;
  std::int64_t numel() const;
  DType dtype() const;
  bool is_contiguous() const;
  std::int64_t offset() const;

  // Pointer to the first element (after the view's offset).
  float* data() const;  // f32 only
  template <class T>
  T* data_as() const {
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  std::vector<float> to_vector() const;  // f32 values in logical (row-major) order

  // ---- element access for tests and printing
  float at(std::initializer_list<std::int64_t> index) const;
  void set(std::initializer_list<std::int64_t> index, float value);
  float item() const;  // one-element tensors

  // ---- views (share storage; differentiable)
  Tensor view(const Shape& shape) const;     // requires compatible strides
  Tensor reshape(const Shape& shape) const;  // view when possible, else copy
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  Tensor transpose(std::int64_t a, std::int64_t b) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor expand(const Shape& shape) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;

  // ---- autograd
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);
  Tensor grad() const;  // undefined until a backward pass reached this tensor
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;  // drops the gradient (as PyTorch's set_to_none=True)
  // Runs the backward pass from this tensor; `gradient` defaults to 1 for one-element tensors.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;
  bool is_leaf() const;
  std::shared_ptr<Node> grad_fn() const;

  // In-place updates (optimisers, loading): bump the version so that what was derived from the
  // old contents (oneDNN's blocked weights) is rebuilt. Versions are unique across all tensors
  // (fresh_tensor_version), so (data pointer, version) names contents even when a freed tensor's
  // memory is reused by a new one.
  void bump_version() const;
  std::uint64_t version() const;

  std::shared_ptr<TensorImpl> impl() const { return impl_; }
  std::string to_string() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// A version no tensor has had before (a process-wide counter).
std::uint64_t fresh_tensor_version();

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::int64_t offset = 0;  // in elements
  Shape shape, strides;
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;         // set on results of differentiable ops
  std::weak_ptr<Node> grad_accumulator;  // leaves: where their gradient is summed
  std::shared_ptr<std::uint64_t> version =
      std::make_shared<std::uint64_t>(fresh_tensor_version());  // shared by views
};

}  // namespace cpudl
