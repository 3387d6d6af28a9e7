// Tensor storage, factories, views and element access.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpudl/error.h"
#include "cpudl/ops.h"
#include "cpudl/runtime.h"
#include "cpudl/tensor.h"
#include "runtime/block_cache.h"
#include "tensor/layout.h"

namespace cpudl {
namespace {

TEST(Tensor, FactoriesAndAlignment) {
  const Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.strides(), (Shape{3, 1}));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(z.raw_data()) % 64, 0u);
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(Tensor::full({2}, 3.5f).to_vector(), (std::vector<float>{3.5f, 3.5f}));
  EXPECT_EQ(Tensor::arange(0, 5).to_vector(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::arange(1, 2, 0.25f).numel(), 4);
  EXPECT_EQ(Tensor::scalar(2.0f).dim(), 0);
  EXPECT_EQ(Tensor::scalar(2.0f).item(), 2.0f);
  EXPECT_THROW(Tensor::from_vector({1, 2, 3}, {2, 2}), Error);
  EXPECT_EQ(Tensor::zeros({3}, DType::i32).dtype(), DType::i32);
  EXPECT_THROW(Tensor::zeros({3}, DType::i32).data(), Error);  // f32 access to an int tensor
}

TEST(Tensor, SeededRandomIsReproducibleAndDistributedRight) {
  Generator a(42), b(42);
  EXPECT_EQ(Tensor::randn({16}, a).to_vector(), Tensor::randn({16}, b).to_vector());
  Generator g(7);
  const auto n = Tensor::randn({20000}, g).to_vector();
  double mean = 0, var = 0;
  for (float v : n) mean += v / 20000.0;
  for (float v : n) var += (v - mean) * (v - mean) / 20000.0;
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
  for (float v : Tensor::rand({1000}, g).to_vector()) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.0f);
  }
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::arange(0, 24).reshape({2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.at({3, 1, 2}), t.at({1, 2, 3}));
  t.set({1, 2, 3}, 100.0f);
  EXPECT_EQ(p.at({3, 1, 2}), 100.0f);  // same storage
  EXPECT_EQ(p.contiguous().at({3, 1, 2}), 100.0f);
  EXPECT_TRUE(p.contiguous().is_contiguous());
  EXPECT_THROW(p.view({24}), Error);  // not viewable: reshape copies instead
  EXPECT_EQ(p.reshape({24}).numel(), 24);

  Tensor s = t.slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.at({0, 1, 1}), t.at({0, 1, 3}));
  EXPECT_EQ(t.slice(0, -1, 2).shape(), (Shape{1, 3, 4}));

  Tensor e = Tensor::arange(0, 3).reshape({3, 1}).expand({3, 4});
  EXPECT_EQ(e.strides()[1], 0);
  EXPECT_EQ(e.at({2, 3}), 2.0f);
  EXPECT_THROW(Tensor::zeros({3, 2}).expand({3, 4}), Error);

  EXPECT_EQ(t.transpose(0, 2).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.unsqueeze(1).shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(t.unsqueeze(1).squeeze(1).shape(), t.shape());
  EXPECT_EQ(t.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(t.view({-1, 6}).shape(), (Shape{4, 6}));
  EXPECT_THROW(t.view({5, -1}), Error);
}

// v.contiguous() element i must be the element of v's storage at sum(index_d * stride_d): an
// odometer over the index, independent of copy_strided's row walk and thread split.
template <class T>
void expect_contiguous_copy_follows_strides(const Tensor& v) {
  SCOPED_TRACE(shape_text(v.shape()));
  const Tensor c = v.contiguous();
  ASSERT_EQ(c.shape(), v.shape());
  if (v.numel() == 0) return;
  ASSERT_TRUE(c.is_contiguous());
  const auto* from = static_cast<const T*>(v.raw_data());
  const auto* got = static_cast<const T*>(c.raw_data());
  const Shape& shape = v.shape();
  std::vector<std::int64_t> index(shape.size(), 0);
  for (std::int64_t i = 0; i < v.numel(); ++i) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) offset += index[d] * v.strides()[d];
    ASSERT_EQ(got[i], from[offset]) << "element " << i;
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// Strided copies of every element size (f32, i64, bf16 and i8 storage): permutations (inner
// stride 1 and not), stepped slices, broadcasts (stride 0 innermost and outer), a scalar, empty
// shapes, and copies large enough to be split over the threads (~1M elements).
TEST(Tensor, StridedCopiesFollowTheStrides) {
  Generator gen(5);
  const Tensor big = Tensor::randn({4, 48, 33, 40}, gen);
  expect_contiguous_copy_follows_strides<float>(big.permute({0, 2, 3, 1}));  // NCHW -> NHWC order
  expect_contiguous_copy_follows_strides<float>(big.permute({3, 1, 0, 2}));  // inner stride 33
  expect_contiguous_copy_follows_strides<float>(big.slice(2, 1, 33, 3).slice(3, 2, 40, 2));
  expect_contiguous_copy_follows_strides<float>(big.transpose(2, 3));
  expect_contiguous_copy_follows_strides<float>(Tensor::randn({7, 1}, gen).expand({7, 300}));
  expect_contiguous_copy_follows_strides<float>(Tensor::randn({1, 5}, gen).expand({4000, 5}));
  expect_contiguous_copy_follows_strides<float>(Tensor::randn({3, 0, 4}, gen).permute({2, 0, 1}));
  expect_contiguous_copy_follows_strides<float>(Tensor::scalar(2.5f).expand({3, 2}));
  for (const DType dtype : {DType::i64, DType::bf16, DType::i8}) {
    SCOPED_TRACE(static_cast<int>(dtype));
    Tensor t = Tensor::empty({6, 70, 9, 11}, dtype);
    auto* bytes = static_cast<std::uint8_t*>(t.raw_data());
    const std::size_t n = static_cast<std::size_t>(t.numel()) * dtype_size(dtype);
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::uint8_t>(gen.next_u64());
    const Tensor p = t.permute({1, 3, 0, 2}), q = t.slice(1, 3, 70, 4);
    if (dtype == DType::i64) {
      expect_contiguous_copy_follows_strides<std::int64_t>(p);
      expect_contiguous_copy_follows_strides<std::int64_t>(q);
    } else if (dtype == DType::bf16) {
      expect_contiguous_copy_follows_strides<std::uint16_t>(p);
      expect_contiguous_copy_follows_strides<std::uint16_t>(q);
    } else {
      expect_contiguous_copy_follows_strides<std::int8_t>(p);
      expect_contiguous_copy_follows_strides<std::int8_t>(q);
    }
  }
}

TEST(Tensor, ElementAccessErrorsNameTheProblem) {
  const Tensor t = Tensor::zeros({2, 3});
  try {
    t.at({2, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 2 out of range for dim 0 of shape [2, 3]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(t.at({0}), Error);
  EXPECT_THROW(t.item(), Error);
}

TEST(Tensor, PrintingShowsValuesAndShape) {
  const std::string s = Tensor::arange(0, 4).reshape({2, 2}).to_string();
  EXPECT_EQ(s, "tensor([[0, 1], [2, 3]], shape=[2, 2])");
  EXPECT_NE(Tensor::zeros({100}).to_string().find("..."), std::string::npos);
}

TEST(Tensor, BroadcastingErrorsNameOpAndShapes) {
  try {
    add(Tensor::zeros({2, 3}), Tensor::zeros({4}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "add: shapes [2, 3] and [4] do not broadcast");
  }
  try {
    matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul: shapes [2, 3] and [4, 5] cannot be multiplied"),
              std::string::npos);
  }
}

TEST(Tensor, ForwardValuesOfBroadcastingOps) {
  const Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector({10, 20, 30}, {3});
  EXPECT_EQ(add(a, b).to_vector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  const Tensor col = Tensor::from_vector({1, -1}, {2, 1});
  EXPECT_EQ(mul(a, col).to_vector(), (std::vector<float>{1, 2, 3, -4, -5, -6}));
  EXPECT_EQ(sum(a, {0}).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(a, {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(sum(a).item(), 21.0f);
  EXPECT_EQ(mean(a, {1}).to_vector(), (std::vector<float>{2, 5}));
  EXPECT_EQ(max(a, 1).to_vector(), (std::vector<float>{3, 6}));
  const Tensor am = argmax(a, 0);
  EXPECT_EQ(am.dtype(), DType::i64);
  EXPECT_EQ(am.data_as<std::int64_t>()[2], 1);
  EXPECT_EQ(matmul(a, Tensor::ones({3, 1})).to_vector(), (std::vector<float>{6, 15}));
  EXPECT_EQ(matmul(a, Tensor::ones({3})).shape(), (Shape{2}));
}

// Channels-last tensors (tensor/layout.h): detection, conversion both ways through the tiled
// transpose, and element-wise ops that keep the layout and still compute in logical order.
TEST(Tensor, ChannelsLastLayoutRoundTripsAndIsPreserved) {
  Generator gen(5);
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{3, 17, 9, 11}, Shape{1, 64, 3, 3}, Shape{2, 1, 5, 5}}) {
    SCOPED_TRACE(shape_text(shape));
    const Tensor x = Tensor::randn(shape, gen);
    const Tensor cl = channels_last_values(x);
    EXPECT_TRUE(is_channels_last(cl));
    EXPECT_TRUE(is_dense(cl));
    EXPECT_EQ(cl.to_vector(), x.to_vector());  // same logical values
    EXPECT_EQ(cl.contiguous().to_vector(), x.to_vector());
    EXPECT_EQ(shape[1] == 1, cl.is_contiguous());  // one channel: both layouts at once
    // NHWC memory order, element by element.
    const float* p = cl.data();
    for (std::int64_t n = 0; n < shape[0]; ++n)
      for (std::int64_t h = 0; h < shape[2]; ++h)
        for (std::int64_t w = 0; w < shape[3]; ++w)
          for (std::int64_t c = 0; c < shape[1]; ++c) ASSERT_EQ(*p++, x.at({n, c, h, w}));
    const Tensor r = relu(cl), sum_cl = add(cl, cl), mixed = add(cl, x);
    EXPECT_TRUE(is_channels_last(r));
    EXPECT_TRUE(is_channels_last(sum_cl));
    const std::vector<float> xv = x.to_vector(), rv = r.to_vector(), sv = sum_cl.to_vector(),
                             mv = mixed.to_vector();
    for (std::size_t i = 0; i < xv.size(); ++i) {
      ASSERT_EQ(rv[i], std::max(xv[i], 0.0f));
      ASSERT_EQ(sv[i], xv[i] + xv[i]);
      ASSERT_EQ(mv[i], xv[i] + xv[i]);
    }
  }
  EXPECT_FALSE(is_dense(Tensor::zeros({4, 6}).slice(1, 0, 3)));
  EXPECT_TRUE(is_dense(Tensor::zeros({4, 6}).transpose(0, 1)));
  // Any permutation of a dense tensor is dense, whatever the stride order (the dims are sorted).
  const Tensor t4 = Tensor::zeros({2, 3, 4, 5});
  EXPECT_TRUE(is_dense(t4.transpose(0, 3).transpose(1, 2)));
  EXPECT_TRUE(is_dense(t4.transpose(1, 3)));
  EXPECT_FALSE(is_dense(t4.slice(2, 1, 3).transpose(0, 3)));
  EXPECT_FALSE(is_dense(Tensor::zeros({3, 1}).expand({3, 4})));     // a stride-0 dimension
  EXPECT_TRUE(is_dense(Tensor::zeros({1, 6, 1}).transpose(0, 2)));  // size-1 dims are ignored
  // Past the 8 dimensions sorted on the stack.
  const Tensor t9 = Tensor::zeros({2, 1, 2, 1, 2, 1, 2, 1, 2});
  EXPECT_TRUE(is_dense(t9.transpose(0, 8)));
  EXPECT_FALSE(is_dense(t9.slice(0, 0, 1).expand({3, 1, 2, 1, 2, 1, 2, 1, 2})));
}

// Large tensor storage is reused rather than mapped afresh (runtime/block_cache.h): a freed block
// of 1 MB or more is held and served again, aligned; a smaller request takes the head of a cached
// block and leaves its tail cached; a larger one grows a cached block; small blocks are not held;
// live plus cached bytes stay within 1.5x the peak live count (the count itself under a tensor
// memory limit); release empties the cache. (Each
// test runs in its own process, so the live counts here are this test's.)
TEST(Tensor, LargeStorageIsReusedAcrossTensors) {
  EXPECT_EQ(mapped_block_bytes(kMinCachedBlock), kMinCachedBlock);
  EXPECT_EQ(mapped_block_bytes(kMinCachedBlock + 1), kMinCachedBlock + 4096);
  if (!block_cache_enabled()) GTEST_SKIP() << "no caching under AddressSanitizer";
  release_cached_blocks();
  reset_peak_tensor_bytes();
  const std::size_t m12 = std::size_t{12} << 20, m16 = std::size_t{16} << 20, m8 = std::size_t{8} << 20;
  const void* first = nullptr;
  {
    const Tensor big = Tensor::empty({3, 1024, 1024});  // 12 MiB
    first = big.data();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u);
  }
  EXPECT_EQ(cached_block_bytes(), m12);
  {
    const Tensor again = Tensor::empty({3, 1024, 1024});  // 12 MiB again: the same block
    EXPECT_EQ(again.data(), first);
    EXPECT_EQ(cached_block_bytes(), 0u);
    const Tensor other = Tensor::empty({4, 1024, 1024});  // nothing cached: a new block
    EXPECT_NE(other.data(), first);
  }
  EXPECT_EQ(cached_block_bytes(), m12 + m16);
  { const Tensor small = Tensor::empty({1000}); }
  EXPECT_EQ(cached_block_bytes(), m12 + m16);
  {
    // 8 MiB: the head of the 12 MiB block (the smallest that holds it); its 4 MiB tail stays cached.
    Tensor part = Tensor::empty({2, 1024, 1024});
    EXPECT_EQ(part.data(), first);
    EXPECT_EQ(cached_block_bytes(), m12 - m8 + m16);
    std::fill_n(part.data(), 2 << 20, 1.0f);  // the pages are writable to the end
    // 40 MiB, more than any cached block: the 16 MiB one grows into it. Live bytes (48 MiB) are now
    // the highest yet; live + the 4 MiB tail stays within half the peak above it: the tail stays.
    Tensor grown = Tensor::empty({10, 1024, 1024});
    std::fill_n(grown.data(), 10 << 20, 2.0f);
    EXPECT_EQ(cached_block_bytes(), m12 - m8);
    EXPECT_EQ(grown.data()[(10 << 20) - 1], 2.0f);
    EXPECT_EQ(part.data()[(2 << 20) - 1], 1.0f);
  }
  const std::size_t m40 = std::size_t{40} << 20, m1 = std::size_t{1} << 20;
  EXPECT_EQ(cached_block_bytes(), m8 + m40 + (m12 - m8));
  // With the peak brought down to what is live (nothing), a 1 MiB request may keep live + cached
  // within 1.5 MiB only: it takes the head of the 4 MiB block and every other cached byte goes back.
  reset_peak_tensor_bytes();
  { const Tensor one = Tensor::empty({256, 1024}); }
  EXPECT_LE(cached_block_bytes(), m1 + m1 / 2);
  // A 12 MiB tensor from a cached 16 MiB block: live 12 + the 4 MiB tail is within half the peak
  // (12) above it, so the tail stays; under a tensor memory limit the bound is the peak itself and
  // the tail goes back.
  for (const bool limited : {false, true}) {
    SCOPED_TRACE(limited ? "limited" : "unlimited");
    release_cached_blocks();
    { const Tensor sixteen = Tensor::empty({4, 1024, 1024}); }
    reset_peak_tensor_bytes();
    set_tensor_memory_limit(limited ? std::size_t{1} << 30 : 0);
    {
      const Tensor twelve = Tensor::empty({3, 1024, 1024});
      EXPECT_EQ(cached_block_bytes(), limited ? 0u : m16 - m12);
    }
    set_tensor_memory_limit(0);
  }
  release_cached_blocks();
  EXPECT_EQ(cached_block_bytes(), 0u);
}

}  // namespace
}  // namespace cpudl
