// LLM weight kernels: every runnable variant of each weight x activation product against an
// independent double-precision product of the dequantised operands, over token counts around
// the 4-token tile; the activation quantisers bit-exact against the reference; and the weight
// quantisers' round-trip error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/quant/quant.h"
#include "llm/gguf/ggml_types.h"
#include "llm/gguf/quantize.h"

namespace cpudl::kernels {
namespace {

const IsaLevel kMachineLevel = runtime().isa.detected;

std::vector<float> gaussian(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

struct Case {
  GgmlType weight;
  const std::vector<KernelVariant<WeightMatmulFn>>& (*variants)();
  enum Activation { f32, q8a, q8_k } activation;
};

class WeightMatmul : public ::testing::TestWithParam<Case> {};

TEST_P(WeightMatmul, EveryVariantMatchesTheDequantisedProduct) {
  const Case c = GetParam();
  const std::size_t rows = 11, k = 512;  // one token: 4 streams of 2 rows, then 3 rows one by one
  const std::vector<float> w = gaussian(rows * k, 1);
  const std::size_t w_row = llm::row_bytes(c.weight, k);
  std::vector<std::uint8_t> wq(rows * w_row);
  std::vector<float> w_deq(rows * k);
  for (std::size_t r = 0; r < rows; ++r) {
    llm::quantize_row(c.weight, w.data() + r * k, wq.data() + r * w_row, k);
    llm::dequantize_row(c.weight, wq.data() + r * w_row, w_deq.data() + r * k, k);
  }
  for (std::size_t tokens : {1, 2, 3, 4, 5, 8, 9}) {
    SCOPED_TRACE("tokens " + std::to_string(tokens));
    const std::vector<float> x = gaussian(tokens * k, 2 + static_cast<unsigned>(tokens));
    std::size_t x_row = k * sizeof(float);
    if (c.activation == Case::q8a) x_row = k / 32 * sizeof(BlockQ8A);
    if (c.activation == Case::q8_k) x_row = k / 256 * sizeof(BlockQ8_K);
    std::vector<std::uint8_t> xq(tokens * x_row);
    std::vector<double> x_deq(tokens * k);
    for (std::size_t t = 0; t < tokens; ++t) {
      const float* src = x.data() + t * k;
      void* dst = xq.data() + t * x_row;
      if (c.activation == Case::f32) {
        std::memcpy(dst, src, x_row);
        for (std::size_t i = 0; i < k; ++i) x_deq[t * k + i] = src[i];
      } else if (c.activation == Case::q8a) {
        quantize_row_q8a__ref(src, dst, k);
        const auto* b = static_cast<const BlockQ8A*>(dst);
        for (std::size_t i = 0; i < k; ++i)
          x_deq[t * k + i] = static_cast<double>(b[i / 32].d) * b[i / 32].qs[i % 32];
      } else {
        quantize_row_q8_k__ref(src, dst, k);
        const auto* b = static_cast<const BlockQ8_K*>(dst);
        for (std::size_t i = 0; i < k; ++i)
          x_deq[t * k + i] = static_cast<double>(b[i / 256].d) * b[i / 256].qs[i % 256];
      }
    }
    int ran = 0;
    for (const auto& variant : c.variants()) {
      if (variant.level > kMachineLevel) continue;
      SCOPED_TRACE(variant.name);
      const std::size_t ldy = rows + 3;
      std::vector<float> y(tokens * ldy, -1.0f);
      variant.fn({wq.data(), w_row, xq.data(), x_row, y.data(), ldy, rows, tokens, k});
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t r = 0; r < rows; ++r) {
          double expected = 0, scale = 0;
          for (std::size_t i = 0; i < k; ++i) {
            expected += w_deq[r * k + i] * x_deq[t * k + i];
            scale += std::fabs(w_deq[r * k + i] * x_deq[t * k + i]);
          }
          ASSERT_NEAR(y[t * ldy + r], expected, 1e-5 * scale) << "row " << r << " token " << t;
        }
      for (std::size_t t = 0; t < tokens; ++t)
        for (std::size_t r = rows; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -1.0f) << "wrote past the rows";
      ++ran;
    }
    EXPECT_GE(ran, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, WeightMatmul,
                         ::testing::Values(Case{GgmlType::f32, f32_f32_matmul_variants, Case::f32},
                                           Case{GgmlType::f16, f16_f32_matmul_variants, Case::f32},
                                           Case{GgmlType::bf16, bf16_f32_matmul_variants, Case::f32},
                                           Case{GgmlType::q8_0, q8_0_q8a_matmul_variants, Case::q8a},
                                           Case{GgmlType::q4_0, q4_0_q8a_matmul_variants, Case::q8a},
                                           Case{GgmlType::q4_k, q4_k_q8_k_matmul_variants, Case::q8_k},
                                           Case{GgmlType::q6_k, q6_k_q8_k_matmul_variants, Case::q8_k}),
                         [](const auto& info) {
                           return std::string(
                               llm::ggml_type_info(static_cast<std::uint32_t>(info.param.weight))->name);
                         });

// The prompt panels: rows packed eight at a time (every pack variant with every GEMM variant
// this CPU runs, partial panels of 3 and 7 rows included) against the double product of the
// dequantised rows and activations, as above. Q8_0's product has only a VNNI variant and the
// reference; the reference always runs.
template <class Panel, class PackVariants, class GemmVariants>
void check_panel(GgmlType type, const PackVariants& packs, const GemmVariants& gemms) {
  const std::size_t k = 256;
  constexpr int kRows = sizeof(Panel::d) / sizeof(Panel::d[0]);  // 8, or 16 for the sixteen-row panels
  for (const int rows : {kRows, kRows - 1, 3}) {
    const std::vector<float> w = gaussian(static_cast<std::size_t>(rows) * k, 11);
    const std::size_t w_row = llm::row_bytes(type, k);
    std::vector<std::uint8_t> wq(static_cast<std::size_t>(rows) * w_row);
    std::vector<float> w_deq(static_cast<std::size_t>(rows) * k);
    for (int r = 0; r < rows; ++r) {
      llm::quantize_row(type, w.data() + static_cast<std::size_t>(r) * k, wq.data() + r * w_row, k);
      llm::dequantize_row(type, wq.data() + r * w_row, w_deq.data() + static_cast<std::size_t>(r) * k, k);
    }
    // 16 and 33: AMX's full tiles of 16 tokens, then a tail of 1.
    for (const std::size_t tokens : {1, 2, 3, 4, 5, 6, 7, 9, 16, 33}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " tokens " + std::to_string(tokens));
      const std::vector<float> x = gaussian(tokens * k, 12 + static_cast<unsigned>(tokens));
      const std::size_t x_row = k / 32 * sizeof(BlockQ8A);
      std::vector<std::uint8_t> xq(tokens * x_row);
      std::vector<double> x_deq(tokens * k);
      for (std::size_t t = 0; t < tokens; ++t) {
        quantize_row_q8a__ref(x.data() + t * k, xq.data() + t * x_row, k);
        const auto* b = reinterpret_cast<const BlockQ8A*>(xq.data() + t * x_row);
        for (std::size_t i = 0; i < k; ++i)
          x_deq[t * k + i] = static_cast<double>(b[i / 32].d) * b[i / 32].qs[i % 32];
      }
      int ran = 0;
      for (const auto& pack : packs) {
        if (pack.level > kMachineLevel) continue;
        std::vector<Panel> panel(k / 32);
        std::memset(panel.data(), 0x5A, panel.size() * sizeof(Panel));  // a group the pack missed would show
        pack.fn(wq.data(), w_row, rows, k, panel.data());
        for (const auto& gemm : gemms) {
          if (gemm.level > kMachineLevel) continue;
          SCOPED_TRACE(std::string(pack.name) + " pack, " + gemm.name + " gemm");
          const std::size_t ldy = kRows + 3;
          std::vector<float> y(tokens * ldy, -1.0f);
          gemm.fn(panel.data(), k, xq.data(), x_row, tokens, y.data(), ldy, rows);
          for (std::size_t t = 0; t < tokens; ++t)
            for (std::size_t r = 0; r < ldy; ++r) {
              if (r >= static_cast<std::size_t>(rows)) {
                ASSERT_EQ(y[t * ldy + r], -1.0f) << "wrote past the rows";
                continue;
              }
              double expected = 0, scale = 0;
              for (std::size_t i = 0; i < k; ++i) {
                expected += w_deq[r * k + i] * x_deq[t * k + i];
                scale += std::fabs(w_deq[r * k + i] * x_deq[t * k + i]);
              }
              ASSERT_NEAR(y[t * ldy + r], expected, 1e-5 * scale) << "row " << r << " token " << t;
            }
          ++ran;
        }
      }
      // Every pack and product this CPU can run ran: the reference everywhere, the native ones
      // where the machine has their units (the AMX product skips on a VNNI-only CPU).
      int runnable = 0;
      for (const auto& pack : packs)
        for (const auto& gemm : gemms) runnable += pack.level <= kMachineLevel && gemm.level <= kMachineLevel;
      EXPECT_EQ(ran, runnable) << "a pack or product this CPU runs was left out";
      EXPECT_GE(ran, 1) << "the reference runs everywhere";
    }
  }
}

TEST(Q4_0Panel, PackedProductMatchesTheDequantisedProduct) {
  check_panel<Q4_0x8Block>(GgmlType::q4_0, pack_q4_0x8_variants(), q4_0x8_q8a_gemm_variants());
}

TEST(Q8_0Panel, PackedProductMatchesTheDequantisedProduct) {
  if (kMachineLevel < IsaLevel::avx512_vnni)
    std::printf("note: no AVX512-VNNI here: only the reference Q8_0 panel product is checked\n");
  check_panel<Q8_0x8Block>(GgmlType::q8_0, pack_q8_0x8_variants(), q8_0x8_q8a_gemm_variants());
}

TEST(AmxPanel, Q8_0AndQ4_0TileProductsMatchTheDequantisedProduct) {
  if (kMachineLevel < IsaLevel::amx)
    std::printf(
        "note: skipped the AMX tile product: no AMX here (or no OS permission); the reference runs\n");
  check_panel<Q8_0x16Block>(GgmlType::q8_0, pack_q8_0x16_variants(), q8_0x16_q8a_gemm_variants());
  check_panel<Q8_0x16Block>(GgmlType::q4_0, pack_q4_0x16_variants(), q8_0x16_q8a_gemm_variants());
}

// The tile panels and Q4_0's generation panels through the dot-product kernels (VPDPBUSD) for
// several tokens: CPUs without AMX, and fewer tokens than a tile.
TEST(DotPanel, Q8_0Q4_0TileAndQ4_0GenerationPanelsMatchTheDequantisedProduct) {
  if (kMachineLevel < IsaLevel::avx512_vnni)
    std::printf("note: no AVX512-VNNI here: only the reference products of the sixteen-row panels run\n");
  check_panel<Q8_0x16Block>(GgmlType::q8_0, pack_q8_0x16_variants(), q8_0x16_q8a_dot_gemm_variants());
  check_panel<Q8_0x16Block>(GgmlType::q4_0, pack_q4_0x16_variants(), q8_0x16_q8a_dot_gemm_variants());
  check_panel<Q4_0x16Block>(GgmlType::q4_0, pack_q4_0x16_nibbles_variants(), q4_0x16_q8a_gemm_variants());
}

// Generation over the tile panels: every gemv variant against the reference GEMM of one token, 1
// to 5 row groups (the kernel's four-group streams and the single-group rest), partial last group.
TEST(AmxPanel, Q8_0GemvMatchesTheReferenceProduct) {
  const std::size_t k = 256;
  for (const std::size_t rows : {16, 13, 64, 75}) {
    const std::vector<float> w = gaussian(rows * k, 21);
    const std::size_t w_row = llm::row_bytes(GgmlType::q8_0, k);
    std::vector<std::uint8_t> wq(rows * w_row);
    for (std::size_t r = 0; r < rows; ++r)
      llm::quantize_row(GgmlType::q8_0, w.data() + r * k, wq.data() + r * w_row, k);
    const std::size_t groups = (rows + 15) / 16;
    std::vector<Q8_0x16Block> panel(groups * (k / 32));
    for (std::size_t g = 0; g < groups; ++g)
      pack_q8_0x16__ref(wq.data() + g * 16 * w_row, w_row,
                        static_cast<int>(std::min<std::size_t>(16, rows - g * 16)), k,
                        panel.data() + g * (k / 32));
    const std::vector<float> x = gaussian(k, 22);
    std::vector<BlockQ8A> xq(k / 32);
    quantize_row_q8a__ref(x.data(), xq.data(), k);
    std::vector<float> want(rows + 1, -1.0f);
    q8_0x16_q8a_gemv__ref(panel.data(), k, xq.data(), want.data(), rows);
    for (const auto& v : q8_0x16_q8a_gemv_variants()) {
      if (v.level > kMachineLevel) continue;
      SCOPED_TRACE(std::string(v.name) + ", rows " + std::to_string(rows));
      std::vector<float> y(rows + 1, -1.0f);
      v.fn(panel.data(), k, xq.data(), y.data(), rows);
      for (std::size_t r = 0; r < rows; ++r)
        ASSERT_NEAR(y[r], want[r], 1e-4 * (1.0 + std::fabs(want[r]))) << r;
      EXPECT_EQ(y[rows], -1.0f) << "wrote past the rows";
    }
  }
}

// Generation panels (one token, 16 rows a group): every gemv variant this CPU runs, the
// reference included, against the double product of the dequantised rows and activations, 1 to
// 5 row groups (the VNNI kernels' four-group streams and the single-group rest), a partial last
// group. XBlock is the activation block (BlockQ8A per 32 values, BlockQ8_K per 256) and `pack`
// makes a group's panel blocks of `values` columns each.
template <class Panel, class XBlock, class Pack, class Variants, class Quantize>
void check_generation_panel(GgmlType type, std::size_t k, std::size_t values, Pack pack,
                            const Variants& variants, Quantize quantize_x, unsigned seed) {
  constexpr std::size_t kX = sizeof(XBlock::qs);  // activation values per block
  for (const std::size_t rows : {16, 13, 64, 75}) {
    const std::vector<float> w = gaussian(rows * k, seed);
    const std::size_t w_row = llm::row_bytes(type, k);
    std::vector<std::uint8_t> wq(rows * w_row);
    std::vector<float> w_deq(rows * k);
    for (std::size_t r = 0; r < rows; ++r) {
      llm::quantize_row(type, w.data() + r * k, wq.data() + r * w_row, k);
      llm::dequantize_row(type, wq.data() + r * w_row, w_deq.data() + r * k, k);
    }
    const std::size_t groups = (rows + 15) / 16;
    std::vector<Panel> panel(groups * (k / values));
    for (std::size_t g = 0; g < groups; ++g)
      pack(wq.data() + g * 16 * w_row, w_row, static_cast<int>(std::min<std::size_t>(16, rows - g * 16)), k,
           panel.data() + g * (k / values));
    const std::vector<float> x = gaussian(k, seed + 1);
    std::vector<XBlock> xq(k / kX);
    quantize_x(x.data(), xq.data(), k);
    int ran = 0;
    for (const auto& v : variants) {
      if (v.level > kMachineLevel) continue;
      SCOPED_TRACE(std::string(v.name) + ", rows " + std::to_string(rows));
      std::vector<float> y(rows + 1, -1.0f);
      v.fn(panel.data(), k, xq.data(), y.data(), rows);
      for (std::size_t r = 0; r < rows; ++r) {
        double want = 0, scale = 0;
        for (std::size_t i = 0; i < k; ++i) {
          const double xi = static_cast<double>(xq[i / kX].d) * xq[i / kX].qs[i % kX];
          want += w_deq[r * k + i] * xi;
          scale += std::fabs(w_deq[r * k + i] * xi);
        }
        ASSERT_NEAR(y[r], want, 1e-5 * scale) << r;
      }
      EXPECT_EQ(y[rows], -1.0f) << "wrote past the rows";
      ++ran;
    }
    EXPECT_GE(ran, kMachineLevel >= IsaLevel::avx512_vnni ? 2 : 1);
  }
}

TEST(Q4_0GenerationPanel, GemvMatchesTheDequantisedProduct) {
  if (kMachineLevel < IsaLevel::avx512_vnni)
    std::printf("note: no AVX512-VNNI here: only the reference Q4_0 panel gemv is checked\n");
  check_generation_panel<Q4_0x16Block, BlockQ8A>(GgmlType::q4_0, 256, 32, pack_q4_0x16_nibbles__ref,
                                                 q4_0x16_q8a_gemv_variants(), quantize_row_q8a__ref, 31);
}

// Q4_K (Q4_Kx16Block): two 256-value blocks a row.
TEST(Q4_KGenerationPanel, GemvMatchesTheDequantisedProduct) {
  if (kMachineLevel < IsaLevel::avx512_vnni)
    std::printf("note: no AVX512-VNNI here: only the reference Q4_K panel gemv is checked\n");
  check_generation_panel<Q4_Kx16Block, BlockQ8_K>(GgmlType::q4_k, 512, 256, pack_q4_kx16__ref,
                                                  q4_kx16_q8_k_gemv_variants(), quantize_row_q8_k__ref, 41);
}

// K-quant prompts (q4_kx16_q8_k_gemm, q6_kx16_q8_k_gemm): every variant against the double
// product of the dequantised rows and Q8_K activations, for 1 to 9 tokens (the VNNI kernels' tiles
// of four and their rest), whole and partial row groups; rows past `rows` and past the tokens
// untouched.
template <class Panel, class Pack, class Variants>
void check_k_quant_gemm(GgmlType type, Pack pack, const Variants& variants) {
  const std::size_t k = 512;
  for (const int rows : {16, 13, 3}) {
    const std::vector<float> w = gaussian(static_cast<std::size_t>(rows) * k, 61);
    const std::size_t w_row = llm::row_bytes(type, k);
    std::vector<std::uint8_t> wq(static_cast<std::size_t>(rows) * w_row);
    std::vector<float> w_deq(static_cast<std::size_t>(rows) * k);
    for (int r = 0; r < rows; ++r) {
      llm::quantize_row(type, w.data() + r * k, wq.data() + r * w_row, k);
      llm::dequantize_row(type, wq.data() + r * w_row, w_deq.data() + r * k, k);
    }
    std::vector<Panel> panel(k / 256);
    pack(wq.data(), w_row, rows, k, panel.data());
    for (const std::size_t tokens : {1, 2, 3, 4, 5, 9}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " tokens " + std::to_string(tokens));
      const std::vector<float> x = gaussian(tokens * k, 62 + static_cast<unsigned>(tokens));
      std::vector<BlockQ8_K> xq(tokens * (k / 256));
      for (std::size_t t = 0; t < tokens; ++t)
        quantize_row_q8_k__ref(x.data() + t * k, xq.data() + t * (k / 256), k);
      const std::size_t ldy = 19;
      int ran = 0;
      for (const auto& v : variants) {
        if (v.level > kMachineLevel) continue;
        SCOPED_TRACE(v.name);
        std::vector<float> y((tokens + 1) * ldy, -1.0f);
        v.fn(panel.data(), k, xq.data(), (k / 256) * sizeof(BlockQ8_K), tokens, y.data(), ldy, rows);
        for (std::size_t t = 0; t <= tokens; ++t)
          for (std::size_t r = 0; r < ldy; ++r) {
            if (t == tokens || r >= static_cast<std::size_t>(rows)) {
              ASSERT_EQ(y[t * ldy + r], -1.0f) << "wrote past the rows or tokens: " << t << " " << r;
              continue;
            }
            double want = 0, scale = 0;
            for (std::size_t i = 0; i < k; ++i) {
              const BlockQ8_K& b = xq[t * (k / 256) + i / 256];
              const double xi = static_cast<double>(b.d) * b.qs[i % 256];
              want += w_deq[r * k + i] * xi;
              scale += std::fabs(w_deq[r * k + i] * xi);
            }
            ASSERT_NEAR(y[t * ldy + r], want, 1e-5 * scale) << t << " " << r;
          }
        ++ran;
      }
      EXPECT_EQ(ran, kMachineLevel >= IsaLevel::avx512_vnni ? 2 : 1);
    }
  }
}

TEST(KQuantPromptPanel, GemmsMatchTheDequantisedProduct) {
  if (kMachineLevel < IsaLevel::avx512_vnni)
    std::printf("note: no AVX512-VNNI here: only the reference K-quant panel products are checked\n");
  check_k_quant_gemm<Q4_Kx16Block>(GgmlType::q4_k, pack_q4_kx16__ref, q4_kx16_q8_k_gemm_variants());
  check_k_quant_gemm<Q6_Kx16Block>(GgmlType::q6_k, pack_q6_kx16__ref, q6_kx16_q8_k_gemm_variants());
}

// Q6_K (Q6_Kx16Block): two 256-value blocks a row.
TEST(Q6_KGenerationPanel, GemvMatchesTheDequantisedProduct) {
  if (kMachineLevel < IsaLevel::avx512_vnni)
    std::printf("note: no AVX512-VNNI here: only the reference Q6_K panel gemv is checked\n");
  check_generation_panel<Q6_Kx16Block, BlockQ8_K>(GgmlType::q6_k, 512, 256, pack_q6_kx16__ref,
                                                  q6_kx16_q8_k_gemv_variants(), quantize_row_q8_k__ref, 43);
}

// Every pack variant this CPU runs writes the reference's bytes, for whole and partial row groups
// and rows spaced wider than their blocks (a pack that reads rows at the wrong stride, or misses a
// byte of the panel, shows): the products above take the reference's layout as their spec.
template <class Panel, class Variants>
void check_packs_match_the_reference(GgmlType type, std::size_t values, const Variants& variants) {
  const std::size_t k = 3 * values;
  for (const int rows : {16, 13, 1}) {
    for (const std::size_t padding : {std::size_t{0}, std::size_t{6}}) {
      const std::size_t w_row = llm::row_bytes(type, k) + padding;
      const std::vector<float> w = gaussian(static_cast<std::size_t>(rows) * k, 51 + rows);
      std::vector<std::uint8_t> wq(static_cast<std::size_t>(rows) * w_row, 0xEE);
      for (int r = 0; r < rows; ++r)
        llm::quantize_row(type, w.data() + static_cast<std::size_t>(r) * k, wq.data() + r * w_row, k);
      std::vector<Panel> want(k / values), got(k / values);
      std::memset(want.data(), 0x5A, want.size() * sizeof(Panel));
      variants.back().fn(wq.data(), w_row, rows, k, want.data());
      int ran = 0;
      for (const auto& v : variants) {
        if (v.level > kMachineLevel) continue;
        SCOPED_TRACE(std::string(v.name) + ", rows " + std::to_string(rows) + ", padding " +
                     std::to_string(padding));
        std::memset(got.data(), 0xA5, got.size() * sizeof(Panel));
        v.fn(wq.data(), w_row, rows, k, got.data());
        const auto* a = reinterpret_cast<const std::uint8_t*>(want.data());
        const auto* b = reinterpret_cast<const std::uint8_t*>(got.data());
        for (std::size_t i = 0; i < want.size() * sizeof(Panel); ++i)
          ASSERT_EQ(a[i], b[i]) << "byte " << i % sizeof(Panel) << " of block " << i / sizeof(Panel);
        ++ran;
      }
      EXPECT_EQ(ran, kMachineLevel >= IsaLevel::avx512 ? 2 : 1);
    }
  }
}

TEST(PanelPack, EveryVariantWritesTheReferencesBytes) {
  if (kMachineLevel < IsaLevel::avx512) std::printf("note: no AVX-512 here: only the reference packs run\n");
  ASSERT_STREQ(pack_q8_0x16_variants().back().name, "pack_q8_0x16__ref");
  check_packs_match_the_reference<Q8_0x16Block>(GgmlType::q8_0, 32, pack_q8_0x16_variants());
  check_packs_match_the_reference<Q8_0x16Block>(GgmlType::q4_0, 32, pack_q4_0x16_variants());
  check_packs_match_the_reference<Q4_0x16Block>(GgmlType::q4_0, 32, pack_q4_0x16_nibbles_variants());
  check_packs_match_the_reference<Q4_Kx16Block>(GgmlType::q4_k, 256, pack_q4_kx16_variants());
  check_packs_match_the_reference<Q6_Kx16Block>(GgmlType::q6_k, 256, pack_q6_kx16_variants());
}

TEST(QuantizeRow, Q8AVariantsAreBitExact) {
  for (std::size_t k : {32, 64, 4096}) {
    std::vector<float> x = gaussian(k, 5);
    x[3] = 0.0f;
    std::vector<float> zeros(32, 0.0f);
    std::vector<BlockQ8A> expected(k / 32), got(k / 32);
    quantize_row_q8a__ref(x.data(), expected.data(), k);
    for (const auto& variant : quantize_row_q8a_variants()) {
      if (variant.level > kMachineLevel) continue;
      SCOPED_TRACE(variant.name);
      variant.fn(x.data(), got.data(), k);
      for (std::size_t b = 0; b < k / 32; ++b) {
        ASSERT_EQ(got[b].d, expected[b].d) << "block " << b;
        ASSERT_EQ(got[b].sum, expected[b].sum) << "block " << b;
        for (int i = 0; i < 32; ++i)
          ASSERT_EQ(got[b].qs[i], expected[b].qs[i]) << "block " << b << " value " << i;
      }
      variant.fn(zeros.data(), got.data(), 32);  // an all-zero block: scale 0, no division by zero
      EXPECT_EQ(got[0].d, 0);
      EXPECT_EQ(got[0].qs[0], 0);
    }
  }
}

TEST(QuantizeRow, Q8KVariantsAreBitExact) {
  for (std::size_t k : {256, 4096}) {
    std::vector<float> x = gaussian(k, 6);
    x[5] = 0.0f;
    std::vector<BlockQ8_K> expected(k / 256), got(k / 256);
    quantize_row_q8_k__ref(x.data(), expected.data(), k);
    for (const auto& variant : quantize_row_q8_k_variants()) {
      if (variant.level > kMachineLevel) continue;
      SCOPED_TRACE(variant.name);
      variant.fn(x.data(), got.data(), k);
      for (std::size_t b = 0; b < k / 256; ++b) {
        ASSERT_EQ(got[b].d, expected[b].d) << "block " << b;
        for (int i = 0; i < 256; ++i)
          ASSERT_EQ(got[b].qs[i], expected[b].qs[i]) << "block " << b << " value " << i;
        for (int g = 0; g < 16; ++g)
          ASSERT_EQ(got[b].bsums[g], expected[b].bsums[g]) << "block " << b << " sum " << g;
      }
    }
  }
}

// Relative RMS error of a quantise / dequantise round trip of Gaussian weights; bounds from the
// formats' step sizes (8, 4 and 6 bits), with margin.
TEST(QuantizeRow, WeightRoundTripErrorIsWhatTheFormatAllows) {
  const std::size_t k = 256 * 64;
  const std::vector<float> x = gaussian(k, 9);
  const std::pair<GgmlType, double> bounds[] = {{GgmlType::f16, 1e-3},  {GgmlType::bf16, 5e-3},
                                                {GgmlType::q8_0, 1e-2}, {GgmlType::q6_k, 4e-2},
                                                {GgmlType::q4_0, 0.12}, {GgmlType::q4_k, 0.12}};
  for (const auto& [type, bound] : bounds) {
    std::vector<std::uint8_t> q(llm::row_bytes(type, k));
    std::vector<float> back(k);
    llm::quantize_row(type, x.data(), q.data(), k);
    llm::dequantize_row(type, q.data(), back.data(), k);
    double err = 0, ref = 0;
    for (std::size_t i = 0; i < k; ++i) {
      err += (back[i] - x[i]) * static_cast<double>(back[i] - x[i]);
      ref += static_cast<double>(x[i]) * x[i];
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LT(rel, bound) << llm::ggml_type_info(static_cast<std::uint32_t>(type))->name;
    EXPECT_GT(rel, 0.0) << "a lossy format cannot be exact on Gaussian data";
  }
}

TEST(Half, ConversionsMatchF16CRoundingAtTheEdges) {
  const float values[] = {0.0f,          -0.0f,          1.0f,           65504.0f,
                          65520.0f,      6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f,
                          1.0009765625f, 1.00048828125f, -3.1415926f,    1e-9f};
  const std::uint16_t expected[] = {0x0000, 0x8000, 0x3C00, 0x7BFF, 0x7C00, 0x0400,
                                    0x0001, 0x0000, 0x3C01, 0x3C00, 0xC248, 0x0000};
  for (std::size_t i = 0; i < sizeof values / sizeof values[0]; ++i) {
    EXPECT_EQ(f32_to_fp16(values[i]), expected[i]) << values[i];
    if (expected[i] != 0x7C00) {
      EXPECT_NEAR(fp16_to_f32(expected[i]), values[i], std::fabs(values[i]) * 1e-3 + 6e-8);
    }
  }
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
}

}  // namespace
}  // namespace cpudl::kernels

namespace cpudl::kernels {
namespace {

// Every dequantiser variant against the reference, bit for bit (a product by the block scale).
TEST(DequantizeRow, VariantsMatchTheReference) {
  const std::size_t k = 512;
  const std::vector<float> x = gaussian(k, 11);
  const std::pair<GgmlType, const std::vector<KernelVariant<DequantizeRowFn>>& (*)()> cases[] = {
      {GgmlType::f16, dequantize_row_f16_variants},   {GgmlType::bf16, dequantize_row_bf16_variants},
      {GgmlType::q8_0, dequantize_row_q8_0_variants}, {GgmlType::q4_0, dequantize_row_q4_0_variants},
      {GgmlType::q4_k, dequantize_row_q4_k_variants}, {GgmlType::q6_k, dequantize_row_q6_k_variants}};
  for (const auto& [type, variants] : cases) {
    std::vector<std::uint8_t> q(llm::row_bytes(type, k));
    llm::quantize_row(type, x.data(), q.data(), k);
    std::vector<float> expected(k), got(k);
    variants().back().fn(q.data(), expected.data(), k);  // the reference is last
    for (const auto& variant : variants()) {
      if (variant.level > kMachineLevel) continue;
      SCOPED_TRACE(variant.name);
      variant.fn(q.data(), got.data(), k);
      EXPECT_EQ(got, expected);
    }
  }
}

}  // namespace
}  // namespace cpudl::kernels
