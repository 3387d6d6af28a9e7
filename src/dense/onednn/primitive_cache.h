// An LRU of ready-to-run oneDNN primitives, keyed by everything that shapes them (op, dims,
// layout, attributes, threads). A hit costs a hash and a splice: no allocation, no primitive
// descriptor, so a training loop creates nothing in its steady state.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/onednn/engine.h"

namespace cpudl::onednn {

// Every kind of primitive the caches hold, listed once: a key's first word, so that no two kinds
// can collide.
enum class PrimitiveKind : std::int64_t {
  matmul,
  matmul_bf16,
  linear_forward,
  conv_forward,
  conv_backward_data,
  conv_backward_weights,
  conv_forward_bf16,
  conv_backward_data_bf16,
  conv_backward_weights_bf16,
  pool_forward,
  pool_backward,
  bn_training,
  bn_inference,
  bn_backward,
};

class PrimitiveKey {
 public:
  explicit PrimitiveKey(PrimitiveKind kind) {
    add(static_cast<std::int64_t>(kind));
    add(compute_threads());  // some implementations split work at creation time
  }
  PrimitiveKey& add(std::int64_t value) {
    if (size_ == values_.size()) throw Error("internal: primitive key too long");
    values_[size_++] = value;
    return *this;
  }
  bool operator==(const PrimitiveKey& other) const {
    return size_ == other.size_ &&
           std::equal(values_.begin(), values_.begin() + size_, other.values_.begin());
  }
  std::size_t hash() const {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (std::size_t i = 0; i < size_; ++i)
      h = (h ^ static_cast<std::uint64_t>(values_[i])) * 1099511628211ull;
    return static_cast<std::size_t>(h);
  }

 private:
  std::array<std::int64_t, 40> values_{};
  std::size_t size_ = 0;
};

// A float's bit pattern, for keys that hold attribute values.
inline std::int64_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

struct PrimitiveKeyHash {
  std::size_t operator()(const PrimitiveKey& key) const { return key.hash(); }
};

inline constexpr std::size_t kPrimitiveCacheCapacity = 256;

template <class Entry>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(std::size_t capacity = kPrimitiveCacheCapacity) : capacity_(capacity) {}

  // The entry for `key`, created by `make()` on a miss. A template, not std::function: wrapping
  // the caller's lambda would allocate on every hit.
  template <class Make>
  std::shared_ptr<Entry> get(const PrimitiveKey& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      counters().cache_hits.fetch_add(1, std::memory_order_relaxed);
      return it->second->second;
    }
    const ThreadScope openmp(0);  // oneDNN sizes a primitive by OpenMP's count: make it ours
    std::shared_ptr<Entry> entry = make();
    counters().primitives_created.fetch_add(1, std::memory_order_relaxed);
    lru_.emplace_front(key, entry);
    index_.emplace(key, lru_.begin());
    if (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
      counters().cache_evictions.fetch_add(1, std::memory_order_relaxed);
    }
    return entry;
  }

  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lru_.size();
  }

 private:
  using Item = std::pair<PrimitiveKey, std::shared_ptr<Entry>>;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Item> lru_;
  std::unordered_map<PrimitiveKey, typename std::list<Item>::iterator, PrimitiveKeyHash> index_;
};

}  // namespace cpudl::onednn
