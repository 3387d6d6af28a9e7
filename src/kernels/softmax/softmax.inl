// Softmax-family bodies over the SIMD traits V; avx2.cpp / avx512.cpp define V and CPUDL_ISA.
// Each row: one pass for the maximum, one for the exponentials and their sum, one to scale.
#include "kernels/simd/loops.inl"
#include "kernels/simd/math.inl"
#include "kernels/softmax/softmax.h"

#define CPUDL_PASTE2(a, b) a##__##b
#define CPUDL_PASTE(a, b) CPUDL_PASTE2(a, b)
#define CPUDL_KERNEL(name) CPUDL_PASTE(name, CPUDL_ISA)

namespace cpudl::kernels {
namespace {

using Math = VectorMath<V>;

// y = exp(x - shift), returning the sum of y (tail lanes excluded). The lines ahead_x / ahead_y
// floats further (the next row's) are prefetched meanwhile: a row's passes run one after another,
// its maximum bound by memory and its exponentials by arithmetic, and without the prefetch the
// two never overlapped (rows of 1000 floats also end the hardware streamer's page every row).
// 1000-column softmax on 64 MiB: 57-58 / 68 -> 86 / 107% of the read bandwidth, 1 / 2 threads.
float exp_shifted_store(const float* x, float* y, std::size_t n, float shift, std::ptrdiff_t ahead_x,
                        std::ptrdiff_t ahead_y) {
  const V::F s = V::set1(shift);
  V::F acc0 = V::zero(), acc1 = V::zero();
  std::size_t i = 0;
  constexpr std::size_t W = V::kWidth;
  for (; i + 2 * W <= n; i += 2 * W) {
    __builtin_prefetch(x + i + ahead_x, 0, 3);
    __builtin_prefetch(x + i + W + ahead_x, 0, 3);
    __builtin_prefetch(y + i + ahead_y, 1, 3);
    __builtin_prefetch(y + i + W + ahead_y, 1, 3);
    const V::F e0 = Math::exp_of_nonpositive(V::sub(V::load(x + i), s)),
               e1 = Math::exp_of_nonpositive(V::sub(V::load(x + i + W), s));
    V::store(y + i, e0);
    V::store(y + i + W, e1);
    acc0 = V::add(acc0, e0);
    acc1 = V::add(acc1, e1);
  }
  for (; i + W <= n; i += W) {
    const V::F e = Math::exp_of_nonpositive(V::sub(V::load(x + i), s));
    V::store(y + i, e);
    acc0 = V::add(acc0, e);
  }
  float sum = V::reduce_add(V::add(acc0, acc1));
  if (i < n) {
    float lanes[V::kWidth] = {};
    V::store_partial(lanes, Math::exp_of_nonpositive(V::sub(V::load_partial(x + i, n - i), s)), n - i);
    for (std::size_t j = 0; j < n - i; ++j) {
      y[i + j] = lanes[j];
      sum += lanes[j];
    }
  }
  return sum;
}

}  // namespace

// Rows up to this long keep their exponentials in a stack row when the call's output is
// streamed (softmax and log-softmax write y once, from it, with non-temporal stores); longer
// rows, and calls below g_streaming_store_bytes, go through y itself, which stays cached. Either
// way the exponentials' pass prefetches the next row (exp_shifted_store).
constexpr std::size_t kStackRow = 4096;

void CPUDL_KERNEL(f32_softmax)(const float* x, float* y, std::size_t rows, std::size_t cols,
                               std::size_t ld_in, std::size_t ld_out) {
  const bool stream = cols <= kStackRow && streams_output(rows * cols);
  alignas(64) float stack_row[kStackRow];  // uninitialised: only written rows are read
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_in;
    float* yr = y + r * ld_out;
    float* exps = stream ? stack_row : yr;
    const float sum =
        exp_shifted_store(xr, exps, cols, reduce_max<V>(xr, cols), static_cast<std::ptrdiff_t>(ld_in),
                          stream ? 0 : static_cast<std::ptrdiff_t>(ld_out));
    const V::F inv = V::set1(1.0f / sum);
    write_row<V>(stream, yr, cols,
                 [&](std::size_t i, std::size_t lanes) { return V::mul(load_n<V>(exps + i, lanes), inv); });
  }
  if (stream) V::fence();
}

void CPUDL_KERNEL(f32_log_softmax)(const float* x, float* y, std::size_t rows, std::size_t cols,
                                   std::size_t ld_in, std::size_t ld_out) {
  const bool stream = cols <= kStackRow && streams_output(rows * cols);
  alignas(64) float stack_row[kStackRow];  // uninitialised: only written rows are read
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_in;
    float* yr = y + r * ld_out;
    const float m = reduce_max<V>(xr, cols);
    // Only the exponentials' sum is kept: the row they go through is overwritten below.
    const float sum =
        exp_shifted_store(xr, stream ? stack_row : yr, cols, m, static_cast<std::ptrdiff_t>(ld_in),
                          stream ? 0 : static_cast<std::ptrdiff_t>(ld_out));
    const V::F lse = V::set1(m + __builtin_logf(sum));
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
    float row_sum = 0.0f;
    const float m = eps != 0.0f ? reduce_max_and_sum<V>(x, n, &row_sum) : reduce_max<V>(x, n);
    const float sum = exp_shifted_store(x, exps, n, m, static_cast<std::ptrdiff_t>(a.ld_logits), 0);
    const float loss = m + __builtin_logf(sum) - (1.0f - eps) * x[label] - uniform * row_sum;
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
