// Every kernel variant this CPU can run, against the scalar reference, over edge sizes and
// unaligned starts. Variants above the machine's level are skipped, never executed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/dispatch.h"
#include "runtime/parallel.h"

namespace cpudl::kernels {
namespace {

const IsaLevel kMachineLevel = runtime().isa.detected;

// 0, 1, around every vector width and unroll (8, 16, 32, 64), and a few odd large sizes.
const std::size_t kSizes[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 127, 128, 129, 1000, 4097};

std::vector<float> random_values(std::size_t n, unsigned seed, bool specials) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n + 1);  // +1: tests start at offset 1 for unaligned access
  for (auto& x : v) x = dist(gen);
  if (specials && n > 4) {
    v[1] = -0.0f;
    v[2] = std::numeric_limits<float>::quiet_NaN();
    v[3] = -std::numeric_limits<float>::infinity();
    v[n] = std::numeric_limits<float>::denorm_min();
  }
  return v;
}

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, sizeof a) == 0;
}

template <class Fn, class Check>
void for_each_runnable(const std::vector<KernelVariant<Fn>>& variants, Check check) {
  int ran = 0;
  for (const auto& variant : variants) {
    if (variant.level > kMachineLevel) continue;
    SCOPED_TRACE(variant.name);
    check(variant.fn);
    ++ran;
  }
  EXPECT_GE(ran, 1);
}

void check_binary(const std::vector<KernelVariant<F32BinaryFn>>& variants, F32BinaryFn reference) {
  for_each_runnable(variants, [&](F32BinaryFn fn) {
    for (std::size_t n : kSizes) {
      const auto a = random_values(n, 1, true), b = random_values(n, 2, false);
      std::vector<float> expected(n + 2, 7.0f), got(n + 2, 7.0f);
      reference(a.data() + 1, b.data() + 1, expected.data() + 1, n);
      fn(a.data() + 1, b.data() + 1, got.data() + 1, n);
      for (std::size_t i = 0; i < n + 2; ++i)  // includes one guard element on each side
        ASSERT_TRUE(same_bits_or_both_nan(got[i], expected[i])) << "n=" << n << " i=" << i;
    }
  });
}

TEST(Kernels, F32AddMatchesReference) { check_binary(f32_add_variants(), f32_add_variants().back().fn); }
TEST(Kernels, F32MulMatchesReference) { check_binary(f32_mul_variants(), f32_mul_variants().back().fn); }

TEST(Kernels, F32ReluMatchesReference) {
  const auto reference = f32_relu_variants().back().fn;
  for_each_runnable(f32_relu_variants(), [&](F32UnaryFn fn) {
    for (std::size_t n : kSizes) {
      const auto x = random_values(n, 3, true);
      std::vector<float> expected(n + 2, 7.0f), got(n + 2, 7.0f);
      reference(x.data() + 1, expected.data() + 1, n);
      fn(x.data() + 1, got.data() + 1, n);
      for (std::size_t i = 0; i < n + 2; ++i)
        ASSERT_TRUE(same_bits_or_both_nan(got[i], expected[i])) << "n=" << n << " i=" << i;
    }
  });
}

TEST(Kernels, ReluReferenceSemantics) {
  const float x[] = {-1.0f, 0.0f, 2.5f, std::numeric_limits<float>::quiet_NaN()};
  float y[4];
  f32_relu_variants().back().fn(x, y, 4);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.5f);
  EXPECT_TRUE(std::isnan(y[3]));
}

TEST(Kernels, F32SumMatchesReference) {
  const auto reference = f32_sum_variants().back().fn;
  for_each_runnable(f32_sum_variants(), [&](F32ReduceFn fn) {
    for (std::size_t n : kSizes) {
      const auto x = random_values(n, 4, false);
      double magnitude = 0;
      for (std::size_t i = 1; i <= n; ++i) magnitude += std::fabs(x[i]);
      const float expected = reference(x.data() + 1, n);
      EXPECT_NEAR(fn(x.data() + 1, n), expected, 1e-6 * magnitude + 1e-6) << "n=" << n;
    }
  });
  const float ones[5] = {1, 1, 1, 1, 1};
  EXPECT_EQ(reference(ones, 5), 5.0f);
}

TEST(Kernels, RoofProbesCountTheirWork) {
  for (const auto* variants : {&f32_fma_probe_variants(), &int8_dot_probe_variants(), &bf16_dot_probe_variants()})
    for_each_runnable(*variants, [&](FmaProbeFn fn) {
      float sink = 0;
      const std::uint64_t ops = fn(1000, &sink);
      EXPECT_EQ(ops % 1000, 0u);
      EXPECT_GE(ops / 1000, 32u);  // at least 16 chains x 2 operations per iteration
      EXPECT_TRUE(std::isfinite(sink));
    });
}

TEST(Dispatch, TablePicksTheBestVariantTheLevelAllows) {
  for (int l = 0; l < kIsaLevelCount; ++l) {
    const auto level = static_cast<IsaLevel>(l);
    const KernelTable table = make_kernel_table(level);
    EXPECT_LE(table.f32_add.level, level);
    for (const auto& variant : f32_add_variants())
      if (variant.level <= level) {
        EXPECT_STREQ(table.f32_add.name, variant.name);
        break;
      }
  }
  EXPECT_STREQ(make_kernel_table(IsaLevel::generic).f32_add.name, "f32_add__ref");
  EXPECT_STREQ(make_kernel_table(IsaLevel::avx2).f32_sum.name, "f32_sum__avx2");
  EXPECT_STREQ(make_kernel_table(IsaLevel::avx512_bf16).f32_relu.name, "f32_relu__avx512");
  EXPECT_EQ(kernel_table().level, runtime().isa.active);
}

TEST(ParallelFor, CoversTheRangeOnceInDisjointPieces) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{100003}}) {
    std::vector<int> hits(n, 0);
    parallel_for(n, 16, 4, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) ++hits[i];
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
  }
}

}  // namespace
}  // namespace cpudl::kernels
