// cpudl's own SGEMM: BLIS's five loops around the microkernel tile of the kernel table (14x32
// on AVX-512, 6x16 on AVX2). Written because oneDNN 2.6's AVX2 sgemm reaches ~70% of the FMA roof
// on Zen 3 (docs/BENCHMARKS.md), where a packed register-blocked kernel reaches more. Blocks:
// KC rows of k (an A sliver and a B sliver stay in L1), MC rows of packed A in L2 (both from
// the tile), NC = 4080 columns of packed B in L3.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "blas/blas.h"
#include "cpudl/error.h"
#include "kernels/dispatch.h"
#include "kernels/gemm/gemm.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::blas {

namespace {
constexpr std::int64_t kNc = 4080;
}  // namespace

void native_sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                  const float* b, float* c, bool accumulate, int threads) {
  native_sgemm(kernels::kernel_table().f32_gemm_tile.fn, ta, tb, m, n, k, a, b, c, accumulate, threads);
}

void native_sgemm(const kernels::GemmTile& tile, bool ta, bool tb, std::int64_t m, std::int64_t n,
                  std::int64_t k, const float* a, const float* b, float* c, bool accumulate, int threads) {
  if (tile.mr * tile.nr > kernels::kGemmMaxTileFloats || tile.mc % tile.mr != 0)
    throw Error("native_sgemm: a " + std::to_string(tile.mr) + "x" + std::to_string(tile.nr) +
                " tile with MC " + std::to_string(tile.mc) + " does not fit the driver");
  if (tile.pack_a == nullptr)
    throw Error("native_sgemm: the " + std::to_string(tile.mr) + "x" + std::to_string(tile.nr) +
                " tile has no A packing");
  const auto ukernel = tile.fn;
  const std::int64_t kMr = tile.mr, kNr = tile.nr, kKc = tile.kc, kMc = tile.mc;
  if (k == 0) {
    if (!accumulate)
      for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * n, c + i * n + n, 0.0f);
    return;
  }
  thread_local AlignedBuffer a_buffer, b_buffer;
  const std::int64_t m_strips = (m + kMr - 1) / kMr;
  float* ap = a_buffer.get(static_cast<std::size_t>(m_strips * kMr * kKc));
  float* bp = b_buffer.get(static_cast<std::size_t>((kNc / kNr + 1) * kNr * kKc));

  for (std::int64_t jc = 0; jc < n; jc += kNc) {
    const std::int64_t nc = std::min(kNc, n - jc), n_strips = (nc + kNr - 1) / kNr;
    for (std::int64_t pc = 0; pc < k; pc += kKc) {
      const std::int64_t kc = std::min(kKc, k - pc);
      const bool add = accumulate || pc > 0;
#pragma omp parallel num_threads(threads)
      {
        // Pack B (kc x nc) as nr-column slivers, zero-padded; and all of A (m x kc) as mr-row slivers.
        if (!tb) {
          // Row by row: B's rows stream in order (prefetch-friendly), each 16-column piece going
          // to its sliver. Walking a sliver's column instead reads one line per 8 KB row stride,
          // which cost a third of the run time at 2048^3.
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
#pragma omp for schedule(static)
        for (std::int64_t s = 0; s < m_strips; ++s) {
          float* dst = ap + s * kMr * kc;
          const std::int64_t row0 = s * kMr, height = std::min(kMr, m - row0);
          if (ta && height == kMr) {  // columns of op(A) are rows of A: mr-float copies
            const float* src = a + pc * m + row0;
            for (std::int64_t p = 0; p < kc; ++p)
              std::memcpy(dst + p * kMr, src + p * m, kMr * sizeof(float));
          } else if (!ta) {
            tile.pack_a(a + row0 * k + pc, k, height, kc, dst);
          } else {  // the last rows of a transposed A
            for (std::int64_t p = 0; p < kc; ++p)
              for (std::int64_t i = 0; i < kMr; ++i)
                dst[p * kMr + i] = i < height ? a[(pc + p) * m + row0 + i] : 0.0f;
          }
        }
        // Tiles: each thread takes whole B slivers and sweeps an L2-sized block of A under them.
        for (std::int64_t ic = 0; ic < m; ic += kMc) {
          const std::int64_t mc = std::min(kMc, m - ic);
#pragma omp for schedule(static)
          for (std::int64_t js = 0; js < n_strips; ++js) {
            const std::int64_t j0 = jc + js * kNr, nr = std::min(kNr, jc + nc - j0);
            for (std::int64_t i0 = ic; i0 < ic + mc; i0 += kMr) {
              const std::int64_t mr = std::min(kMr, m - i0);
              const float* a_sliver = ap + (i0 / kMr) * kMr * kc;
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
  }
}

}  // namespace cpudl::blas
