// serve/reuse_pool.h: objects come back to the pool while it holds fewer than `keep` of them and
// `keep_bytes` in all; past either bound they are freed. (std::string::reserve(n) from a short
// string gives a capacity of exactly n, which tells the objects apart.)
#include <gtest/gtest.h>

#include <string>

#include "serve/reuse_pool.h"

namespace {

using cpudl::serve::ReusePool;

std::size_t capacity(const std::string& s) { return s.capacity(); }

TEST(ReusePool, KeepsAtMostItsCountOfObjects) {
  ReusePool<std::string> pool(1, 1 << 20, capacity);
  {
    auto x = pool.take();
    x->reserve(500);
    {
      auto y = pool.take();
      y->reserve(600);
    }  // y is kept
  }    // x is not: the pool holds one
  auto first = pool.take(), second = pool.take();
  EXPECT_EQ(first->capacity(), 600u);
  EXPECT_LT(second->capacity(), 500u);  // made anew
}

TEST(ReusePool, KeepsAtMostItsBytes) {
  ReusePool<std::string> pool(4, 1000, capacity);
  {
    auto x = pool.take();
    x->reserve(700);
    {
      auto y = pool.take();
      y->reserve(600);
    }  // y is kept: 600 bytes
  }    // x is not: 1,300 would pass 1,000
  {
    auto big = pool.take();  // y
    EXPECT_EQ(big->capacity(), 600u);
    auto fresh = pool.take();
    EXPECT_LT(fresh->capacity(), 600u);
    fresh->reserve(5000);  // alone past the bound: freed when given back
  }
  auto first = pool.take(), second = pool.take();
  EXPECT_EQ(first->capacity(), 600u);
  EXPECT_LT(second->capacity(), 600u);
}

}  // namespace
