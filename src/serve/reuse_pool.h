// A bounded pool of objects that requests reuse: an inference request's body buffer and its JSON
// parser. Allocated afresh, their megabytes are page-faulted in on every request -- the serving
// memory policy (runtime/memory_policy.h) maps each block of 256 KiB and more and unmaps it when
// freed -- and in a virtual machine a page fault is a trap to the kernel per 4 KiB (a ResNet-18
// JSON request spent more time in faults and in the copies of a growing body than in its
// inference). Reused, they stay resident. The pool keeps at most `keep` idle objects holding at
// most `keep_bytes` together (`bytes` says what one holds), so what it retains is bounded whatever
// the number of connection threads; a request finding the pool empty makes a new one.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace cpudl::serve {

template <class T>
class ReusePool {
 public:
  using Bytes = std::size_t (*)(const T&);
  ReusePool(std::size_t keep, std::size_t keep_bytes, Bytes bytes)
      : keep_(keep), keep_bytes_(keep_bytes), bytes_(bytes) {}

  // An object on loan: back to the pool when the lease ends.
  class Lease {
   public:
    Lease(ReusePool* pool, std::unique_ptr<T> item) : pool_(pool), item_(std::move(item)) {}
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease() {
      if (item_) pool_->give_back(std::move(item_));
    }
    T& operator*() const { return *item_; }
    T* operator->() const { return item_.get(); }

   private:
    ReusePool* pool_;
    std::unique_ptr<T> item_;
  };

  Lease take() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        std::unique_ptr<T> item = std::move(idle_.back());
        idle_.pop_back();
        idle_bytes_ -= bytes_(*item);
        return Lease(this, std::move(item));
      }
    }
    return Lease(this, std::make_unique<T>());
  }

 private:
  void give_back(std::unique_ptr<T> item) {
    const std::size_t held = bytes_(*item);
    const std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.size() < keep_ && idle_bytes_ + held <= keep_bytes_) {
      idle_.push_back(std::move(item));
      idle_bytes_ += held;
    }
  }

  const std::size_t keep_, keep_bytes_;
  const Bytes bytes_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<T>> idle_;
  std::size_t idle_bytes_ = 0;
};

}  // namespace cpudl::serve
