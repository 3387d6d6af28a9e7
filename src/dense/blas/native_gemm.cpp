// cpudl's own SGEMM: BLIS's five loops around the microkernel tile of the kernel table (14x32
// on AVX-512, 6x16 on AVX2). Written because oneDNN 2.6's AVX2 sgemm reaches ~70% of the FMA roof
// on Zen 3 (docs/BENCHMARKS.md), where a packed register-blocked kernel reaches more.
//
// The tile's vector operand is B (nr columns, loaded) and its broadcast operand A (mr rows), so
// the caches hold BLIS's blocks the other way round: an A sliver (mr x kc, 21 KB at 14 x 384)
// stays in L1 while the B slivers of an NC block (kc x nc, half the L2) stream past it from L2;
// all of op(A)'s kc block is packed once (to L3, shared by the threads) and each NC block of
// op(B) once per kc block, by the thread whose columns it holds, into its own core's L2. The
// order BLIS uses (a B sliver, 48 KB at 384 x 32, over an L2 block of A) keeps neither sliver in
// L1 beside the other.
#include <omp.h>

#include <algorithm>
#include <string>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/blas/blas.h"
#include "kernels/dispatch.h"
#include "kernels/gemm/gemm.h"
#include "kernels/narrow/narrow.h"
#include "runtime/aligned_buffer.h"
#include "runtime/parallel.h"

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
  const auto ncols = static_cast<std::size_t>(n), depth = static_cast<std::size_t>(k);
  parallel_for(static_cast<std::size_t>(m), 1, threads, [&](std::size_t i0, std::size_t i1) {
    if (!accumulate) return forward(a + i0 * depth, w, c + i0 * ncols, i1 - i0, depth, ncols, depth);
    thread_local AlignedBuffer sum_buffer;  // this range's product, then added to C
    float* y = sum_buffer.get((i1 - i0) * ncols);
    forward(a + i0 * depth, w, y, i1 - i0, depth, ncols, depth);
    for (std::size_t i = 0; i < (i1 - i0) * ncols; ++i) c[i0 * ncols + i] += y[i];
  });
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
  thread_local AlignedBuffer a_buffer;
  const std::int64_t m_strips = (m + kMr - 1) / kMr, n_slivers = (n + kNr - 1) / kNr;
  const std::int64_t kc_max = std::min(kKc, k), nc_max = std::min(kNc, n_slivers * kNr);
  float* ap = a_buffer.get(static_cast<std::size_t>(m_strips * kMr * kc_max));
  // Each thread takes a share of op(B)'s columns, packs those B slivers itself (into its own L2)
  // and runs every A sliver over them: with the B block shared, each core read the half the other
  // had packed from the other's cache (two threads, 1024^3: 12.6 -> 11.1 ms; 64x1024x784 0.92 ->
  // 0.73). Too few column slivers to share out (n below 64 a thread): threads take A slivers and
  // each packs all of the narrow B.
  const bool split_columns = n_slivers >= 2 * threads;

#pragma omp parallel num_threads(threads)
  {
    const std::int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
    const std::int64_t col_begin = split_columns ? n_slivers * me / team * kNr : 0;
    const std::int64_t col_end = split_columns ? std::min(n, n_slivers * (me + 1) / team * kNr) : n;
    const std::int64_t is_begin = split_columns ? 0 : m_strips * me / team;
    const std::int64_t is_end = split_columns ? m_strips : m_strips * (me + 1) / team;
    thread_local AlignedBuffer b_buffer;
    float* bp = b_buffer.get(static_cast<std::size_t>(nc_max * kc_max));
    for (std::int64_t pc = 0; pc < k; pc += kKc) {
      const std::int64_t kc = std::min(kKc, k - pc);
      const bool add = accumulate || pc > 0;
      // All of op(A)'s kc block, as mr-row slivers (the loop's barrier: packed before any tile).
#pragma omp for schedule(static)
      for (std::int64_t s = 0; s < m_strips; ++s) {
        float* dst = ap + s * kMr * kc;
        const std::int64_t row0 = s * kMr, height = std::min(kMr, m - row0);
        if (!ta) {
          tile.pack_a(a + row0 * k + pc, k, height, kc, dst);
        } else {  // columns of op(A) are rows of A: copies of `height` floats (the tile reads no more)
          const float* src = a + pc * m + row0;
          for (std::int64_t p = 0; p < kc; ++p) kernels::copy_tile_floats(src + p * m, height, dst + p * kMr);
        }
      }
      for (std::int64_t jc = col_begin; jc < col_end; jc += kNc) {
        const std::int64_t nc = std::min(kNc, col_end - jc), n_strips = (nc + kNr - 1) / kNr;
        // This thread's kc x nc block of op(B) as nr-column slivers (a partial one's columns past
        // n left unset: the tile reads no further).
        if (!tb) {
          // Row by row: B's rows stream in order (prefetch-friendly), each piece going to its
          // sliver. Walking a sliver's column instead reads one line per 8 KB row stride, which
          // cost a third of the run time at 2048^3.
          for (std::int64_t p = 0; p < kc; ++p) {
            const float* src = b + (pc + p) * n + jc;
            for (std::int64_t s = 0; s < n_strips; ++s)
              kernels::copy_tile_floats(src + s * kNr, std::min(kNr, nc - s * kNr),
                                        bp + s * kNr * kc + p * kNr);
          }
        } else {
          for (std::int64_t s = 0; s < n_strips; ++s) {  // columns of op(B) are rows of B
            const std::int64_t col0 = jc + s * kNr;
            tile.pack_b(b + col0 * k + pc, k, std::min(kNr, jc + nc - col0), kc, bp + s * kNr * kc);
          }
        }
        // Each A sliver held in L1 while the block's B slivers stream past it from L2.
        for (std::int64_t is = is_begin; is < is_end; ++is)
          for (std::int64_t js = 0; js < n_strips; ++js) {
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
#pragma omp barrier  // every tile done with this A block before the next one is packed
    }
  }
}

}  // namespace cpudl::blas
