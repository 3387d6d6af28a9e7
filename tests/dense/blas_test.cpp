// Switchable BLAS: backend names, the clear error for a missing library, and OpenBLAS/BLIS
// results against the oneDNN path when those libraries are installed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/blas/blas.h"
#include "dense/onednn/dense.h"
#include "kernels/dispatch.h"

namespace cpudl::blas {
namespace {

TEST(Blas, BackendNames) {
  for (Backend b : kAllBackends) EXPECT_EQ(parse_backend(backend_name(b)), b);
  try {
    parse_backend("mkl");
    FAIL();
  } catch (const UsageError& e) {
    // Every valid name, from the one list (the message once left out native).
    EXPECT_STREQ(e.what(), "CPUDL_BLAS=mkl: unknown backend (expected onednn, native, openblas or blis)");
  }
  try {
    parse_backend("mkl", "--backends");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--backends=mkl: unknown backend"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(available(Backend::onednn));
}

TEST(Blas, CblasBackendsAgreeWithOneDnn) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  const std::int64_t m = 37, n = 29, k = 53;
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  for (auto& x : a) x = dist(gen);
  for (auto& x : b) x = dist(gen);
  int tested = 0;
  for (Backend backend : {Backend::openblas, Backend::blis}) {
    if (!available(backend)) continue;
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size(), 1.0f);
      onednn::matmul_onednn(onednn::MatmulShape{1, m, n, k, ta, tb}, a.data(), b.data(), want.data());
      cblas_sgemm(backend, ta, tb, m, n, k, a.data(), b.data(), got.data(), false, 2);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4) << backend_name(backend) << " t" << t << " at " << i;
      std::vector<float> acc(want.size(), 1.0f);
      cblas_sgemm(backend, ta, tb, m, n, k, a.data(), b.data(), acc.data(), true, 1);
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(acc[i], want[i] + 1.0f, 1e-4);
    }
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "neither OpenBLAS nor BLIS is installed (make bench installs them)";
}

TEST(Blas, NativeSgemmMatchesOneDnnOnEdgeShapes) {
  std::mt19937 gen(6);
  std::uniform_real_distribution<float> dist(-1, 1);
  // Sizes around the 6x16 and 14x32 tiles and their KC blocks (256, 384), including k beyond
  // one KC block; each also with small NC blocks, and on two threads with few A slivers (the
  // B slivers split between them).
  const std::int64_t shapes[][3] = {{1, 1, 1},       {5, 15, 7},      {6, 16, 256},   {7, 17, 257},
                                    {14, 32, 384},   {15, 33, 385},   {145, 33, 300}, {13, 4097, 5},
                                    {64, 1024, 784}, {16, 1000, 513}, {23, 10, 700}};
  for (const auto& s : shapes) {
    const std::int64_t m = s[0], n = s[1], k = s[2];
    std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
    for (auto& x : a) x = dist(gen);
    for (auto& x : b) x = dist(gen);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size(), 9.0f),
          acc(want.size(), 1.0f);
      onednn::matmul_onednn(onednn::MatmulShape{1, m, n, k, ta, tb}, a.data(), b.data(), want.data());
      for (const auto& tile : kernels::f32_gemm_tile_variants()) {  // every tile this CPU runs
        if (tile.level > runtime().isa.detected) continue;
        SCOPED_TRACE(tile.name);
        std::fill(got.begin(), got.end(), 9.0f);
        std::fill(acc.begin(), acc.end(), 1.0f);
        native_sgemm(tile.fn, ta, tb, m, n, k, a.data(), b.data(), got.data(), false, 2);
        native_sgemm(tile.fn, ta, tb, m, n, k, a.data(), b.data(), acc.data(), true, 1);
        // NC blocks of three slivers: several column blocks, the last one partial.
        std::vector<float> blocked(want.size(), 9.0f);
        native_sgemm(tile.fn, ta, tb, m, n, k, a.data(), b.data(), blocked.data(), false, 2,
                     2 * tile.fn.nr + 1);
        for (std::size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-4 * std::sqrt(static_cast<double>(k)))
              << m << "x" << n << "x" << k << " t" << t << " at " << i;
          ASSERT_NEAR(acc[i], want[i] + 1.0f, 1e-4 * std::sqrt(static_cast<double>(k)));
          ASSERT_NEAR(blocked[i], want[i], 1e-4 * std::sqrt(static_cast<double>(k))) << "blocked at " << i;
        }
      }
      // The table's choice (the narrow kernel for {6, 16, 256} and {23, 10, 700}, untransposed A).
      std::fill(acc.begin(), acc.end(), 1.0f);
      native_sgemm(ta, tb, m, n, k, a.data(), b.data(), got.data(), false, 1);
      native_sgemm(ta, tb, m, n, k, a.data(), b.data(), acc.data(), true, 2);
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4 * std::sqrt(static_cast<double>(k))) << "table's choice at " << i;
        ASSERT_NEAR(acc[i], want[i] + 1.0f, 1e-4 * std::sqrt(static_cast<double>(k)));
      }
    }
  }
  // A tile without an A or a B packing is refused, not run.
  const kernels::GemmTile portable = kernels::f32_gemm_tile_variants().back().fn;
  const kernels::GemmTile no_a{portable.fn, 6, 16, 256, nullptr, portable.pack_b};
  const kernels::GemmTile no_b{portable.fn, 6, 16, 256, portable.pack_a, nullptr};
  float one = 1.0f, out = 0.0f;
  EXPECT_THROW(native_sgemm(no_a, false, false, 1, 1, 1, &one, &one, &out, false, 1), Error);
  EXPECT_THROW(native_sgemm(no_b, false, true, 1, 1, 1, &one, &one, &out, false, 1), Error);
  // k = 0: C = 0 (or kept, accumulating), with nothing packed.
  std::vector<float> empty_product(6, 5.0f);
  native_sgemm(portable, false, false, 2, 3, 0, nullptr, nullptr, empty_product.data(), true, 1);
  EXPECT_EQ(empty_product, std::vector<float>(6, 5.0f));
  native_sgemm(portable, false, false, 2, 3, 0, nullptr, nullptr, empty_product.data(), false, 1);
  EXPECT_EQ(empty_product, std::vector<float>(6, 0.0f));
  EXPECT_EQ(parse_backend("native"), Backend::native);
  EXPECT_TRUE(available(Backend::native));
}

TEST(Blas, SlowKernelWarningNamesTheKernel) {
  if (!available(Backend::openblas)) GTEST_SKIP() << "OpenBLAS is not installed";
  const std::string kernel = kernel_name(Backend::openblas);
  ASSERT_FALSE(kernel.empty());
  const bool avx512_kernel = kernel == "SkylakeX" || kernel == "Cooperlake" || kernel == "SapphireRapids";
  // The same library on an AVX-512 CPU: warned unless it picked an AVX-512 kernel.
  const std::string warning = slow_kernel_warning(Backend::openblas, true);
  EXPECT_EQ(warning.empty(), avx512_kernel) << warning;
  if (!warning.empty()) {
    EXPECT_NE(warning.find(kernel), std::string::npos) << warning;
  }
  // On a CPU without AVX-512 an AVX2 kernel is the right one.
  if (!avx512_kernel) {
    EXPECT_EQ(slow_kernel_warning(Backend::openblas, false), "");
  }
  EXPECT_EQ(slow_kernel_warning(Backend::onednn, true), "");
}

}  // namespace
}  // namespace cpudl::blas
