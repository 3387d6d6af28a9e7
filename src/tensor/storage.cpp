// Aligned storage, dtypes and the seeded random generator.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpudl/error.h"
#include "cpudl/tensor.h"
#include "runtime/block_cache.h"

namespace cpudl {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i8:
    case DType::u8:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i8:
      return "i8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "unknown";
}

std::string shape_text(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  return s + "]";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error("shape " + shape_text(shape) + ": negative size");
    n *= d;
  }
  return n;
}

// 64-byte alignment: a cache line, and the widest vector load (AVX-512) never splits one. Large
// blocks are reused rather than mapped afresh (runtime/block_cache.h).
Storage::Storage(std::size_t bytes) : data_(allocate_block(bytes)), bytes_(bytes) {}

Storage::Storage(void* borrowed, std::size_t bytes, std::shared_ptr<void> owner)
    : data_(borrowed), bytes_(bytes), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (!owner_) free_block(data_, bytes_);
}

std::uint64_t Generator::next_u64() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float Generator::uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }

float Generator::normal() {
  // Box-Muller on (0, 1]: never log(0).
  const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  const double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(std::uint64_t seed) { default_generator().seed(seed); }

}  // namespace cpudl
