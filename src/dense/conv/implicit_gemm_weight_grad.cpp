// The implicit-GEMM weight gradient's driver (see the header): the reduction over output pixels P
// is cut into balanced blocks of at most KC (longer where dW is past L2: reduction_block); per
// block, dY^T is packed as MR-row slivers (all output channels, shared by the threads) and each
// thread packs its own NR-column slivers of im2col(X), sweeping every A sliver under each. C = dW
// in OHWI order, KH*KW*C columns, stays in the caches across blocks; a last pass reorders it into
// OIHW.
#include "dense/conv/implicit_gemm_weight_grad.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "cpudl/runtime.h"
#include "kernels/dispatch.h"
#include "kernels/gemm/gemm.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::conv {

bool implicit_gemm_weight_grad_applies(const dense::ConvShape& s) {
  static const bool enabled = switched_on("CPUDL_IMPLICIT_GEMM");
  const auto& tile = kernels::kernel_table().f32_gemm_tile.fn;
  return enabled && s.layout == dense::ActivationLayout::nhwc && s.groups == 1 && s.dilation_h == 1 &&
         s.dilation_w == 1 && s.in_channels % tile.nr == 0 && s.out_height() > 0 && s.out_width() > 0;
}

bool implicit_gemm_weight_grad_preferred(const dense::ConvShape& s) {
  return implicit_gemm_weight_grad_applies(s) && (s.stride_h > 1 || s.stride_w > 1) &&
         s.kernel_h * s.kernel_w > 1 && s.out_channels >= 256;
}

namespace {

// The packing loops read a few channels of each pixel, pixels hundreds of bytes apart (strided
// taps, wide rows of dy), which the hardware prefetchers follow poorly: each loop prefetches the
// pixel this many ahead (ResNet-18's layer2.0, 1 thread: 16.4 -> 15.6 ms). The larger part of
// the copies' waiting went with NextBlockPrefetch below.
constexpr std::int64_t kPrefetchPixels = 8;
void prefetch_floats(const float* p, std::int64_t n) {
  __builtin_prefetch(p);
  __builtin_prefetch(p + n - 1);
}

// The output pixel p's coordinates, advanced one pixel at a time (no division per pixel).
struct PixelCursor {
  std::int64_t n = 0, oh = 0, ow = 0;
  void seek(std::int64_t p, std::int64_t out_h, std::int64_t out_w) {
    ow = p % out_w, oh = p / out_w % out_h, n = p / (out_w * out_h);
  }
  void next(std::int64_t out_h, std::int64_t out_w) {
    if (++ow == out_w) {
      ow = 0;
      if (++oh == out_h) oh = 0, ++n;
    }
  }
};

// The next block's inputs, fetched into L2 a few lines at a time between the microkernel calls
// of this block, so that their misses overlap the arithmetic: packed block by block, the
// copies of the first touch had waited on memory with the FMA units idle (22% of a 3x3/2
// layer's time here). The lines are the next block's rows of dy, then, image by image, the
// input rows its taps read (whole rows). No allocation: the images are walked as they come.
class NextBlockPrefetch {
 public:
  NextBlockPrefetch(const dense::ConvShape& s, const float* x, const float* dy, std::int64_t p0,
                    std::int64_t kc, std::int64_t P)
      : s_(s), x_(x) {
    if (p0 >= P) return;
    kc = std::min(kc, P - p0);
    first_.seek(p0, s.out_height(), s.out_width());
    last_.seek(p0 + kc - 1, s.out_height(), s.out_width());
    dy_ = {reinterpret_cast<const char*>(dy + p0 * s.out_channels),
           reinterpret_cast<const char*>(dy + (p0 + kc) * s.out_channels)};
    image_ = first_.n;
    rows_ = input_rows(image_);
    for (std::int64_t n = first_.n; n <= last_.n; ++n) {
      const Range r = input_rows(n);
      lines_ += (r.end - r.next) / 64;
    }
    lines_ += (dy_.end - dy_.next) / 64;
  }
  std::int64_t lines() const { return lines_; }
  void issue(std::int64_t count) {
    count = drain(dy_, count);
    while (count > 0 && image_ <= last_.n) {
      count = drain(rows_, count);
      if (rows_.next >= rows_.end && ++image_ <= last_.n) rows_ = input_rows(image_);
    }
  }

 private:
  struct Range {
    const char *next = nullptr, *end = nullptr;
  };
  // Input rows [top, bottom] of image n that the block's output rows in it reach.
  Range input_rows(std::int64_t n) const {
    const std::int64_t oh0 = n == first_.n ? first_.oh : 0,
                       oh1 = n == last_.n ? last_.oh : s_.out_height() - 1;
    const std::int64_t top = std::max<std::int64_t>(0, oh0 * s_.stride_h - s_.pad_h);
    const std::int64_t bottom = std::min(s_.height - 1, oh1 * s_.stride_h - s_.pad_h + s_.kernel_h - 1);
    if (top > bottom) return {};
    const std::int64_t row = s_.width * s_.in_channels;
    return {reinterpret_cast<const char*>(x_ + (n * s_.height + top) * row),
            reinterpret_cast<const char*>(x_ + (n * s_.height + bottom + 1) * row)};
  }
  static std::int64_t drain(Range& r, std::int64_t count) {
    for (; count > 0 && r.next < r.end; --count, r.next += 64) __builtin_prefetch(r.next, 0, 2);
    return count;
  }
  const dense::ConvShape& s_;
  const float* x_;
  PixelCursor first_, last_;
  Range dy_, rows_;
  std::int64_t image_ = 0, lines_ = 0;
};

// The longest reduction block, in output pixels. Every block after the first reads and rewrites
// all of C (dW, K x J floats). Where C fits in L2 that is cheap and blocks keep the tile's own kc
// (layer3.0, 1.2 MB: one block of 3136 pixels and nine of 349 timed the same). Past L2 (layer4.0,
// 512 x 2304 floats, 4.7 MB) those passes go to L3, so blocks are as long as the A panel (K x kc
// floats, which every B sliver sweeps) fits in 80% of L2: ResNet-18's layer4.0 at batch 16 then
// runs one block of 784 pixels instead of three of 262, 22.7 against 24.8 ms on 1 thread and 13.1
// against 14.0 on 2 (medians of calls alternated in one process, 2 MiB L2).
std::int64_t reduction_block(std::int64_t K, std::int64_t J, std::int64_t P, std::int64_t tile_kc) {
  const auto l2 = static_cast<std::int64_t>(runtime().system.l2_bytes.value_or(std::uint64_t{1} << 20));
  const auto bytes = static_cast<std::int64_t>(sizeof(float));
  if (K * J * bytes <= l2) return tile_kc;
  return std::clamp<std::int64_t>(l2 * 4 / 5 / (K * bytes), tile_kc, std::max(P, tile_kc));
}

}  // namespace

void implicit_gemm_weight_grad(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                               float* db) {
  const kernels::GemmTile& tile = kernels::kernel_table().f32_gemm_tile.fn;
  const std::int64_t mr = tile.mr, nr = tile.nr;
  const std::int64_t C = s.in_channels, K = s.out_channels, H = s.height, W = s.width;
  const std::int64_t KH = s.kernel_h, KW = s.kernel_w, OH = s.out_height(), OW = s.out_width();
  const std::int64_t P = s.batch * OH * OW;  // the GEMM's reduction
  const std::int64_t J = KH * KW * C;        // its columns: (kh, kw, c), c fastest
  const std::int64_t m_slivers = (K + mr - 1) / mr, n_slivers = J / nr;
  const int threads = static_cast<int>(std::min<std::int64_t>(compute_threads(), n_slivers));

  if (db) std::fill(db, db + K, 0.0f);
  thread_local AlignedBuffer gradient_buffer, a_buffer;
  float* grad = gradient_buffer.get(static_cast<std::size_t>(K * J));  // dW, OHWI
  if (P == 0) std::fill(grad, grad + K * J, 0.0f);
  const std::int64_t block = reduction_block(K, J, P, tile.kc), blocks = (P + block - 1) / block;
  const std::int64_t kc_max = blocks ? (P + blocks - 1) / blocks : 0;
  float* a_panel = a_buffer.get(static_cast<std::size_t>(m_slivers * mr * kc_max));

  for (std::int64_t p0 = 0; p0 < P; p0 += kc_max) {
    const std::int64_t kc = std::min(kc_max, P - p0);
    const bool accumulate = p0 > 0;
#pragma omp parallel num_threads(threads)
    {
      // A = dY^T: sliver ms holds output channels [ms*mr, +mr) of each pixel (a last partial
      // sliver's rows past K left unset: the tile reads only its rows); the bias gradient is
      // summed on the way (each sliver's channels by one thread).
#pragma omp for schedule(static)
      for (std::int64_t ms = 0; ms < m_slivers; ++ms) {
        const std::int64_t k0 = ms * mr, rows = std::min(mr, K - k0);
        float* dst = a_panel + ms * mr * kc;
        for (std::int64_t p = 0; p < kc; ++p) {
          const float* src = dy + (p0 + p) * K + k0;
          prefetch_floats(src + kPrefetchPixels * K, rows);
          kernels::copy_tile_floats(src, rows, dst + p * mr);
          if (db)
            for (std::int64_t i = 0; i < rows; ++i) db[k0 + i] += src[i];
        }
      }
      // B = im2col(X): sliver js is channels [c0, +nr) of tap (kh, kw), read where X holds them.
      thread_local AlignedBuffer b_buffer;
      float* b_sliver = b_buffer.get(static_cast<std::size_t>(nr * kc));
      NextBlockPrefetch next_block(s, x, dy, p0 + kc, kc_max, P);
      const std::int64_t my_slivers = (n_slivers + omp_get_num_threads() - 1) / omp_get_num_threads();
      const std::int64_t per_call =
          next_block.lines() / std::max<std::int64_t>(1, my_slivers * m_slivers) + 1;
#pragma omp for schedule(static)
      for (std::int64_t js = 0; js < n_slivers; ++js) {
        const std::int64_t j0 = js * nr, tap = j0 / C, c0 = j0 % C;
        const std::int64_t kh = tap / KW, kw = tap % KW;
        // The tap's pixel of output pixel `at`, or null where it falls in the padding.
        const auto source = [&](const PixelCursor& at) -> const float* {
          const std::int64_t ih = at.oh * s.stride_h - s.pad_h + kh, iw = at.ow * s.stride_w - s.pad_w + kw;
          if (ih < 0 || ih >= H || iw < 0 || iw >= W) return nullptr;
          return x + ((at.n * H + ih) * W + iw) * C + c0;
        };
        PixelCursor at, ahead;
        at.seek(p0, OH, OW);
        ahead.seek(p0 + kPrefetchPixels, OH, OW);
        for (std::int64_t p = 0; p < kc; ++p, at.next(OH, OW), ahead.next(OH, OW)) {
          if (ahead.n < s.batch)
            if (const float* next = source(ahead)) prefetch_floats(next, nr);
          float* dst = b_sliver + p * nr;
          if (const float* src = source(at))
            kernels::copy_tile_floats(src, nr, dst);
          else
            std::fill(dst, dst + nr, 0.0f);
        }
        for (std::int64_t ms = 0; ms < m_slivers; ++ms) {
          const std::int64_t k0 = ms * mr;
          next_block.issue(per_call);
          kernels::GemmTileArgs t{};
          t.k = kc;
          t.a = a_panel + ms * mr * kc;
          t.b = b_sliver;
          t.c = grad + k0 * J + j0;
          t.ldc = J;
          t.rows = static_cast<int>(std::min(mr, K - k0));
          t.cols = static_cast<int>(nr);
          t.accumulate = accumulate;
          tile.fn(t);
        }
      }
    }
  }
  // OHWI -> OIHW: each output channel's [taps][C] block transposed to [C][taps] by the kernel
  // table's transpose (register tiles; one float at a time, this took 0.95 of layer4.0's 22 ms).
  const auto transpose = kernels::kernel_table().f32_transpose.fn;
  const auto taps = static_cast<std::size_t>(KH * KW);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (std::int64_t k = 0; k < K; ++k)
    transpose(grad + k * J, taps, static_cast<std::size_t>(C), static_cast<std::size_t>(C), dw + k * J, taps);
}

}  // namespace cpudl::conv
