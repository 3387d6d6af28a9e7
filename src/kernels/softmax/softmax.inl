// Softmax-family bodies over the SIMD traits V; avx2.cpp / avx512.cpp define V and CPUDL_ISA.
// Each row: one pass for the exponentials and their sum (row_exps, shifted without a pass for the
// maximum), one to scale.
#include "kernels/simd/loops.inl"
#include "kernels/simd/math.inl"
#include "kernels/softmax/softmax.h"

#define CPUDL_PASTE2(a, b) a##__##b
#define CPUDL_PASTE(a, b) CPUDL_PASTE2(a, b)
#define CPUDL_KERNEL(name) CPUDL_PASTE(name, CPUDL_ISA)

namespace cpudl::kernels {
namespace {

using Math = VectorMath<V>;

// What a row's exponentials pass gives back: their shift, their sum and (WithSumOfX) the sum of x,
// for cross-entropy's smoothing.
struct RowExps {
  float shift, sum, sum_of_x;
};

// y = exp(x - shift) over one row (KeepExps; log-softmax needs only their sum), with their sum
// (tail lanes excluded). The lines ahead_x / ahead_y floats further (the next row's) are
// prefetched meanwhile: the exponentials are bound by arithmetic, and without the prefetch the
// next row's reads never overlapped them (rows of 1000 floats also end the hardware streamer's
// page every row). 1000-column softmax on 64 MiB: 57-58 / 68 -> 86 / 107% of the read bandwidth,
// 1 / 2 threads (Xeon, 2026-11).
template <bool KeepExps, bool WithSumOfX>
RowExps exp_shifted_store(const float* x, float* y, std::size_t n, float shift, std::ptrdiff_t ahead_x,
                          std::ptrdiff_t ahead_y) {
  const V::F s = V::set1(shift);
  V::F acc0 = V::zero(), acc1 = V::zero(), xsum0 = V::zero(), xsum1 = V::zero();
  std::size_t i = 0;
  constexpr std::size_t W = V::kWidth;
  for (; i + 2 * W <= n; i += 2 * W) {
    __builtin_prefetch(x + i + ahead_x, 0, 3);
    __builtin_prefetch(x + i + W + ahead_x, 0, 3);
    const V::F x0 = V::load(x + i), x1 = V::load(x + i + W);
    const V::F e0 = Math::exp(V::sub(x0, s)), e1 = Math::exp(V::sub(x1, s));
    if constexpr (KeepExps) {
      __builtin_prefetch(y + i + ahead_y, 1, 3);
      __builtin_prefetch(y + i + W + ahead_y, 1, 3);
      V::store(y + i, e0);
      V::store(y + i + W, e1);
    }
    acc0 = V::add(acc0, e0);
    acc1 = V::add(acc1, e1);
    if constexpr (WithSumOfX) {
      xsum0 = V::add(xsum0, x0);
      xsum1 = V::add(xsum1, x1);
    }
  }
  for (; i + W <= n; i += W) {
    const V::F x0 = V::load(x + i), e = Math::exp(V::sub(x0, s));
    if constexpr (KeepExps) V::store(y + i, e);
    acc0 = V::add(acc0, e);
    if constexpr (WithSumOfX) xsum0 = V::add(xsum0, x0);
  }
  RowExps out{shift, V::reduce_add(V::add(acc0, acc1)),
              WithSumOfX ? V::reduce_add(V::add(xsum0, xsum1)) : 0.0f};
  if (i < n) {
    float lanes[V::kWidth] = {};
    V::store_partial(lanes, Math::exp(V::sub(V::load_partial(x + i, n - i), s)), n - i);
    for (std::size_t j = 0; j < n - i; ++j) {
      if constexpr (KeepExps) y[i + j] = lanes[j];
      out.sum += lanes[j];
      if constexpr (WithSumOfX) out.sum_of_x += x[i + j];
    }
  }
  return out;
}

// e^80: while the exponentials' sum stays below it, none of them passed it, so the shift lies at
// most 80 below the row's maximum, where VectorMath::exp is exact (it clamps its argument to 89,
// so a row far above its shift sums to at least e^89 and is redone).
constexpr float kLargestShiftedSum = 5.54e34f;

// The row's exponentials, shifted as softmax needs only to keep them finite: by the maximum of the
// row's first vector, so that the row is read once. A separate maximum pass, bound by memory where
// the exponentials are bound by arithmetic, does not overlap them and cost a memory-bound softmax
// much of its bandwidth (figures: docs/ARCHITECTURE.md, "read each row once"). The largest exponential is at
// least 1 (the first vector's maximum gives exactly 1), so no term underflows sooner than with the true
// maximum, and the results differ from the two-pass ones by rounding only. The rare row whose sum reaches
// kLargestShiftedSum -- its maximum far above its first vector's, or an inf or NaN in it -- is done again
// shifted by its true maximum, which is exactly the two-pass computation.
template <bool KeepExps, bool WithSumOfX>
RowExps row_exps(const float* x, float* y, std::size_t n, std::ptrdiff_t ahead_x, std::ptrdiff_t ahead_y) {
  const float first = reduce_max<V>(x, n < V::kWidth ? n : V::kWidth);
  const RowExps e = exp_shifted_store<KeepExps, WithSumOfX>(x, y, n, first, ahead_x, ahead_y);
  if (e.sum < kLargestShiftedSum) return e;  // false for NaN
  return exp_shifted_store<KeepExps, WithSumOfX>(x, y, n, reduce_max<V>(x, n), ahead_x, ahead_y);
}

}  // namespace

// Rows up to this long keep softmax's exponentials in a stack row when the call's output is
// streamed (y is written once, from it, with non-temporal stores); longer rows, and calls below
// g_streaming_store_bytes, go through y itself, which stays cached. Log-softmax keeps no
// exponentials, only their sum: it writes y = x - lse straight from x. Either way the
// exponentials' pass prefetches the next row (exp_shifted_store).
constexpr std::size_t kStackRow = 4096;

void CPUDL_KERNEL(f32_softmax)(const float* x, float* y, std::size_t rows, std::size_t cols,
                               std::size_t ld_in, std::size_t ld_out) {
  const bool stream = cols <= kStackRow && streams_output(rows * cols);
  alignas(64) float stack_row[kStackRow];  // uninitialised: only written rows are read
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_in;
    float* yr = y + r * ld_out;
    float* exps = stream ? stack_row : yr;
    const RowExps e = row_exps<true, false>(xr, exps, cols, static_cast<std::ptrdiff_t>(ld_in),
                                            stream ? 0 : static_cast<std::ptrdiff_t>(ld_out));
    const V::F inv = V::set1(1.0f / e.sum);
    write_row<V>(stream, yr, cols,
                 [&](std::size_t i, std::size_t lanes) { return V::mul(load_n<V>(exps + i, lanes), inv); });
  }
  if (stream) V::fence();
}

void CPUDL_KERNEL(f32_log_softmax)(const float* x, float* y, std::size_t rows, std::size_t cols,
                                   std::size_t ld_in, std::size_t ld_out) {
  const bool stream = streams_output(rows * cols);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_in;
    float* yr = y + r * ld_out;
    const RowExps e = row_exps<false, false>(xr, nullptr, cols, static_cast<std::ptrdiff_t>(ld_in), 0);
    const V::F lse = V::set1(e.shift + __builtin_logf(e.sum));
    write_row<V>(stream, yr, cols,
                 [&](std::size_t i, std::size_t lanes) { return V::sub(load_n<V>(xr + i, lanes), lse); });
  }
  if (stream) V::fence();
}

// loss = lse - (1 - eps) x[label] - eps/C sum(x); grad = exp(x - lse) - eps/C - (1 - eps)[label].
// Each row's exponentials go to the caller's scratch row (the next row prefetched meanwhile, as
// in softmax) and the gradient is written from it in one pass, streamed when the call's
// gradient is past g_streaming_store_bytes: one exponential per logit instead of two, and no
// read-for-ownership of dlogits. The loss alone takes the same sums, so it is the same number.
void CPUDL_KERNEL(f32_cross_entropy)(const CrossEntropyArgs& a) {
  const float eps = a.smoothing, uniform = eps / static_cast<float>(a.classes);
  const std::size_t n = a.classes;
  const bool stream = a.dlogits != nullptr && streams_output(a.rows * n);
  float* exps = a.scratch;
  for (std::size_t r = 0; r < a.rows; ++r) {
    const float* x = a.logits + r * a.ld_logits;
    const auto label = static_cast<std::size_t>(a.labels[r]);
    const auto ahead = static_cast<std::ptrdiff_t>(a.ld_logits);
    const RowExps e = eps != 0.0f ? row_exps<true, true>(x, exps, n, ahead, 0)
                                  : row_exps<true, false>(x, exps, n, ahead, 0);
    const float sum = e.sum;
    const float loss = e.shift + __builtin_logf(sum) - (1.0f - eps) * x[label] - uniform * e.sum_of_x;
    a.loss[r] = loss;
    if (a.dlogits) {
      // exp(x - lse) = exp(x - m) / sum; the label's (1 - eps) comes off in the buffer, so
      // the gradient row is written once, in order.
      exps[label] -= (1.0f - eps) * sum;
      const V::F inv = V::set1(1.0f / sum), minus_u = V::set1(-uniform);
      write_row<V>(stream, a.dlogits + r * a.ld_grad, n, [&](std::size_t i, std::size_t lanes) {
        return V::fma(load_n<V>(exps + i, lanes), inv, minus_u);
      });
    }
  }
  if (stream) V::fence();
}

}  // namespace cpudl::kernels
