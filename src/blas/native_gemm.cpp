// cpudl's own SGEMM: BLIS's five loops around the microkernel tile of the kernel table (14x32
// on AVX-512, 6x16 on AVX2). Written because oneDNN 2.6's AVX2 sgemm reaches ~70% of the FMA roof
// on Zen 3 (docs/BENCHMARKS.md), where a packed register-blocked kernel reaches more.
//
// The tile's vector operand is B (nr columns, loaded) and its broadcast operand A (mr rows), so
// the caches hold BLIS's blocks the other way round: an A sliver (mr x kc, 21 KB at 14 x 384)
// stays in L1 while the B slivers of an NC block (kc x nc, half the L2) stream past it from L2;
// all of op(A)'s kc block is packed once (to L3) and each NC block of op(B) once per kc block.
// The order BLIS uses (a B sliver, 48 KB at 384 x 32, over an L2 block of A) keeps neither
// sliver in L1 beside the other.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "blas/blas.h"
#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "kernels/dispatch.h"
#include "kernels/gemm/gemm.h"
#include "kernels/narrow/narrow.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::blas {

namespace {

// Columns of packed op(B) per NC block: half the L2 in kc x nc floats (1 MiB assumed when the
// system does not say), whole slivers, at least one.
std::int64_t columns_for_l2(std::int64_t kc, std::int64_t nr) {
  const std::uint64_t l2 = runtime().system.l2_bytes.value_or(std::uint64_t{1} << 20);
  const auto columns = static_cast<std::int64_t>(l2 / 2 / (static_cast<std::uint64_t>(kc) * sizeof(float)));
  return std::max(nr, columns / nr * nr);
}

constexpr std::int64_t kNarrowMinK = 256;

// Few columns (n <= 16) of an untransposed op(A), a classifier's product such as SimpleCNN's
// 256 x 10 x 21632: each 32-column sliver would be two-thirds padding and all of A (22 MB) packed
// for one use, so it ran at a third of oneDNN's speed. The narrow linear kernels
// (kernels/narrow/narrow.h) stream A once in its own order against op(B)^T ([n][k], B itself when
// transposed, else transposed into a small buffer): rows split over the threads.
bool few_columns(bool ta, std::int64_t n, std::int64_t k) {
  return !ta && n <= static_cast<std::int64_t>(kernels::kNarrowLinearMaxOutputs) && k >= kNarrowMinK;
}

void few_columns_sgemm(bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                       const float* b, float* c, bool accumulate, int threads) {
  thread_local AlignedBuffer w_buffer;
  const float* w = b;
  if (!tb) {
    float* wt = w_buffer.get(static_cast<std::size_t>(n * k));
    kernels::kernel_table().f32_transpose.fn(b, static_cast<std::size_t>(k), static_cast<std::size_t>(n),
                                             static_cast<std::size_t>(n), wt, static_cast<std::size_t>(k));
    w = wt;
  }
  const auto forward = kernels::kernel_table().f32_narrow_linear_forward.fn;
  const std::int64_t rows_per_thread = (m + threads - 1) / threads;
#pragma omp parallel num_threads(threads)
  {
    const std::int64_t i0 = std::min(m, omp_get_thread_num() * rows_per_thread);
    const std::int64_t i1 = std::min(m, i0 + rows_per_thread);
    if (i1 > i0) {
      const auto rows = static_cast<std::size_t>(i1 - i0);
      thread_local AlignedBuffer sum_buffer;  // accumulate: this thread's product, then added to C
      float* y = accumulate ? sum_buffer.get(rows * static_cast<std::size_t>(n)) : c + i0 * n;
      forward(a + i0 * k, w, y, rows, static_cast<std::size_t>(k), static_cast<std::size_t>(n),
              static_cast<std::size_t>(k));
      if (accumulate)
        for (std::size_t i = 0; i < rows * static_cast<std::size_t>(n); ++i) c[i0 * n + i] += y[i];
    }
  }
}

}  // namespace

void native_sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                  const float* b, float* c, bool accumulate, int threads) {
  if (few_columns(ta, n, k)) return few_columns_sgemm(tb, m, n, k, a, b, c, accumulate, threads);
  native_sgemm(kernels::kernel_table().f32_gemm_tile.fn, ta, tb, m, n, k, a, b, c, accumulate, threads);
}

void native_sgemm(const kernels::GemmTile& tile, bool ta, bool tb, std::int64_t m, std::int64_t n,
                  std::int64_t k, const float* a, const float* b, float* c, bool accumulate, int threads,
                  std::int64_t nc_block) {
  if (tile.pack_a == nullptr || tile.pack_b == nullptr)
    throw Error("native_sgemm: the " + std::to_string(tile.mr) + "x" + std::to_string(tile.nr) +
                " tile has no A or B packing");
  const auto ukernel = tile.fn;
  const std::int64_t kMr = tile.mr, kNr = tile.nr, kKc = tile.kc;
  if (k == 0) {
    if (!accumulate)
      for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * n, c + i * n + n, 0.0f);
    return;
  }
  const std::int64_t kNc =
      nc_block > 0 ? (nc_block + kNr - 1) / kNr * kNr : columns_for_l2(std::min(kKc, k), kNr);
  thread_local AlignedBuffer a_buffer, b_buffer;
  const std::int64_t m_strips = (m + kMr - 1) / kMr;
  const std::int64_t kc_max = std::min(kKc, k), nc_max = std::min(kNc, (n + kNr - 1) / kNr * kNr);
  float* ap = a_buffer.get(static_cast<std::size_t>(m_strips * kMr * kc_max));
  float* bp = b_buffer.get(static_cast<std::size_t>(nc_max * kc_max));
  // Work items: A slivers, each swept across the block's B slivers, cut into `parts` runs of them
  // when the slivers do not share out evenly (5 slivers on 2 threads ran 3 against 2). With fewer
  // than two A slivers a thread (m of 16-64, the batch of a fully connected layer): B slivers,
  // each under all the A slivers, so that a 14-row and a 2-row sliver do not land on different
  // threads.
  const bool by_columns = m_strips < 2 * threads;
  const std::int64_t parts = by_columns ? 1 : threads / std::gcd(m_strips, std::int64_t{threads});

#pragma omp parallel num_threads(threads)
  for (std::int64_t pc = 0; pc < k; pc += kKc) {
    const std::int64_t kc = std::min(kKc, k - pc);
    const bool add = accumulate || pc > 0;
    // All of op(A)'s kc block, as mr-row slivers.
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < m_strips; ++s) {
      float* dst = ap + s * kMr * kc;
      const std::int64_t row0 = s * kMr, height = std::min(kMr, m - row0);
      if (!ta) {
        tile.pack_a(a + row0 * k + pc, k, height, kc, dst);
      } else if (height == kMr) {  // columns of op(A) are rows of A: mr-float copies
        const float* src = a + pc * m + row0;
        for (std::int64_t p = 0; p < kc; ++p) kernels::copy_tile_floats(src + p * m, kMr, dst + p * kMr);
      } else {  // the last rows of a transposed A
        for (std::int64_t p = 0; p < kc; ++p)
          for (std::int64_t i = 0; i < kMr; ++i)
            dst[p * kMr + i] = i < height ? a[(pc + p) * m + row0 + i] : 0.0f;
      }
    }
    for (std::int64_t jc = 0; jc < n; jc += kNc) {
      const std::int64_t nc = std::min(kNc, n - jc), n_strips = (nc + kNr - 1) / kNr;
      // op(B)'s kc x nc block as nr-column slivers (a partial one's columns past n left unset).
      if (!tb) {
        // Row by row: B's rows stream in order (prefetch-friendly), each piece going to its
        // sliver. Walking a sliver's column instead reads one line per 8 KB row stride, which
        // cost a third of the run time at 2048^3.
#pragma omp for schedule(static)
        for (std::int64_t p = 0; p < kc; ++p) {
          const float* src = b + (pc + p) * n + jc;
          for (std::int64_t s = 0; s < n_strips; ++s) {
            float* dst = bp + s * kNr * kc + p * kNr;
            const std::int64_t width = std::min(kNr, nc - s * kNr);
            kernels::copy_tile_floats(src + s * kNr, width, dst);  // the tile reads no further
          }
        }
      } else {
#pragma omp for schedule(static)
        for (std::int64_t s = 0; s < n_strips; ++s) {  // columns of op(B) are rows of B
          const std::int64_t col0 = jc + s * kNr;
          tile.pack_b(b + col0 * k + pc, k, std::min(kNr, jc + nc - col0), kc, bp + s * kNr * kc);
        }
      }
      // Tiles: consecutive items per thread, so that a thread keeps its A sliver in L1 across
      // the B slivers (or, by columns, its B sliver across the few A slivers). The loop's barrier
      // keeps the packed block until every tile ran.
      const std::int64_t items = by_columns ? n_strips : m_strips * parts;
#pragma omp for schedule(static)
      for (std::int64_t item = 0; item < items; ++item) {
        const std::int64_t part = item % parts;
        const std::int64_t is0 = by_columns ? 0 : item / parts, is1 = by_columns ? m_strips : is0 + 1;
        const std::int64_t js0 = by_columns ? item : n_strips * part / parts;
        const std::int64_t js1 = by_columns ? item + 1 : n_strips * (part + 1) / parts;
        for (std::int64_t is = is0; is < is1; ++is)
          for (std::int64_t js = js0; js < js1; ++js) {
            const std::int64_t i0 = is * kMr, j0 = jc + js * kNr;
            kernels::GemmTileArgs t{};
            t.k = kc;
            t.a = ap + is * kMr * kc;
            t.b = bp + js * kNr * kc;
            t.c = c + i0 * n + j0;
            t.ldc = n;
            t.rows = static_cast<int>(std::min(kMr, m - i0));
            t.cols = static_cast<int>(std::min(kNr, jc + nc - j0));
            t.accumulate = add;
            ukernel(t);
          }
      }
    }
  }
}

}  // namespace cpudl::blas
