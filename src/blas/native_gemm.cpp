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
#include <string>
#include <vector>

#include "blas/blas.h"
#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "kernels/dispatch.h"
#include "kernels/gemm/gemm.h"
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

}  // namespace

void native_sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                  const float* b, float* c, bool accumulate, int threads) {
  native_sgemm(kernels::kernel_table().f32_gemm_tile.fn, ta, tb, m, n, k, a, b, c, accumulate, threads);
}

void native_sgemm(const kernels::GemmTile& tile, bool ta, bool tb, std::int64_t m, std::int64_t n,
                  std::int64_t k, const float* a, const float* b, float* c, bool accumulate, int threads,
                  std::int64_t nc_block) {
  if (tile.mr * tile.nr > kernels::kGemmMaxTileFloats)
    throw Error("native_sgemm: a " + std::to_string(tile.mr) + "x" + std::to_string(tile.nr) +
                " tile does not fit the driver's edge buffer");
  if (tile.pack_a == nullptr)
    throw Error("native_sgemm: the " + std::to_string(tile.mr) + "x" + std::to_string(tile.nr) +
                " tile has no A packing");
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
  // Work items: A slivers, each split into `parts` runs of B slivers when there are too few
  // slivers to share out (m of 16-64, the batch of a fully connected layer).
  const std::int64_t parts = m_strips >= 2 * threads ? 1 : (2 * threads + m_strips - 1) / m_strips;

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
        for (std::int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * kMr, src + p * m, kMr * sizeof(float));
      } else {  // the last rows of a transposed A
        for (std::int64_t p = 0; p < kc; ++p)
          for (std::int64_t i = 0; i < kMr; ++i)
            dst[p * kMr + i] = i < height ? a[(pc + p) * m + row0 + i] : 0.0f;
      }
    }
    for (std::int64_t jc = 0; jc < n; jc += kNc) {
      const std::int64_t nc = std::min(kNc, n - jc), n_strips = (nc + kNr - 1) / kNr;
      // op(B)'s kc x nc block as nr-column slivers, zero-padded.
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
            std::memcpy(dst, src + s * kNr, static_cast<std::size_t>(width) * sizeof(float));
            if (width < kNr) std::fill(dst + width, dst + kNr, 0.0f);
          }
        }
      } else {
#pragma omp for schedule(static)
        for (std::int64_t s = 0; s < n_strips; ++s) {
          float* dst = bp + s * kNr * kc;
          const std::int64_t col0 = jc + s * kNr, width = std::min(kNr, jc + nc - col0);
          for (std::int64_t j = 0; j < kNr; ++j) {  // a column of op(B) is a row of B: read in order
            if (j >= width) {
              for (std::int64_t p = 0; p < kc; ++p) dst[p * kNr + j] = 0.0f;
              continue;
            }
            const float* src = b + (col0 + j) * k + pc;
            for (std::int64_t p = 0; p < kc; ++p) dst[p * kNr + j] = src[p];
          }
        }
      }
      // Tiles: consecutive items per thread, so that a thread keeps its A sliver in L1 across
      // its runs of B slivers. The loop's barrier keeps the packed block until every tile ran.
#pragma omp for schedule(static)
      for (std::int64_t item = 0; item < m_strips * parts; ++item) {
        const std::int64_t is = item / parts, part = item % parts;
        const std::int64_t i0 = is * kMr, mr = std::min(kMr, m - i0);
        const float* a_sliver = ap + is * kMr * kc;
        for (std::int64_t js = n_strips * part / parts; js < n_strips * (part + 1) / parts; ++js) {
          const std::int64_t j0 = jc + js * kNr, nr = std::min(kNr, jc + nc - j0);
          const float* b_sliver = bp + js * kNr * kc;
          if (mr == kMr && nr == kNr) {
            ukernel(kc, a_sliver, b_sliver, c + i0 * n + j0, n, add);
          } else {
            float edge[kernels::kGemmMaxTileFloats];
            ukernel(kc, a_sliver, b_sliver, edge, kNr, false);
            for (std::int64_t i = 0; i < mr; ++i)
              for (std::int64_t j = 0; j < nr; ++j) {
                float& out = c[(i0 + i) * n + j0 + j];
                out = (add ? out : 0.0f) + edge[i * kNr + j];
              }
          }
        }
      }
    }
  }
}

}  // namespace cpudl::blas
