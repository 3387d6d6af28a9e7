// Loop skeletons over a SIMD traits type V: full vectors (two per iteration where independent
// work helps), then one masked tail. Included by ISA kernel files only, after the traits.

#include <algorithm>
#include <cstdint>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {
namespace {

// out[0, n) = value(i) with non-temporal stores (see kernel_types.h), without the closing
// fence: a masked head up to the first aligned line, four vectors a step, a masked tail.
// value(i) computes lanes i..i+W-1, partial_value(i, lanes) the first `lanes` of them. Row-wise
// kernels call it per row and fence once per call. False, with nothing written, when `out` is
// not float-aligned.
template <class V, class Value, class PartialValue>
bool stream_into(float* out, std::size_t n, Value value, PartialValue partial_value) {
  constexpr std::size_t W = V::kWidth;
  const std::size_t misaligned = reinterpret_cast<std::uintptr_t>(out) % V::kAlignment;
  if (misaligned % sizeof(float) != 0) return false;
  const std::size_t head = std::min(n, misaligned ? (V::kAlignment - misaligned) / sizeof(float) : 0);
  if (head) V::store_partial(out, partial_value(0, head), head);
  std::size_t i = head;
  for (; i + 4 * W <= n; i += 4 * W) {          // four independent vectors keep long
    const auto a = value(i), b = value(i + W);  // dependency chains (exp) overlapped
    const auto c = value(i + 2 * W), d = value(i + 3 * W);
    V::stream(out + i, a);
    V::stream(out + i + W, b);
    V::stream(out + i + 2 * W, c);
    V::stream(out + i + 3 * W, d);
  }
  for (; i + W <= n; i += W) V::stream(out + i, value(i));
  if (i < n) V::store_partial(out + i, partial_value(i, n - i), n - i);
  return true;
}

// Whether a kernel writing `floats` outputs in one call streams them.
inline bool streams_output(std::size_t floats) { return floats * sizeof(float) >= g_streaming_store_bytes; }

// out[i..] = value(i) for vectors of V::kWidth lanes: value(i) computes lanes i..i+W-1 (reading
// past n is avoided by the masked head and tail).
template <class V, class Value, class PartialValue>
void map_into(float* out, std::size_t n, Value value, PartialValue partial_value) {
  constexpr std::size_t W = V::kWidth;
  std::size_t i = 0;
  if (streams_output(n) && stream_into<V>(out, n, value, partial_value)) {
    V::fence();
    return;
  }
  // Four independent vectors per step, as in the streaming loop: the long dependency chains of
  // exp, tanh and GELU (40-60 dependent operations each) are latency-bound with two in flight.
  // Each vector is stored as soon as it is computed: computing all four before the first store
  // (as the streaming loop does) ran a 64 MiB add at 10 GB/s on one core here, against 13-14
  // with the stores in between; GELU and the backward kernels measured the same either way.
  for (; i + 4 * W <= n; i += 4 * W) {
    V::store(out + i, value(i));
    V::store(out + i + W, value(i + W));
    V::store(out + i + 2 * W, value(i + 2 * W));
    V::store(out + i + 3 * W, value(i + 3 * W));
  }
  for (; i + W <= n; i += W) V::store(out + i, value(i));
  if (i < n) V::store_partial(out + i, partial_value(i, n - i), n - i);
}

// Inputs are prefetched this many floats (4 KiB) ahead of the vector being computed. The
// hardware prefetchers keep up with a cheap op, but behind a long dependency chain (GELU: ~130
// cycles a vector) the out-of-order window reaches too few vectors ahead, and the loads of
// memory-resident inputs stopped overlapping the arithmetic: GELU on 64 MiB took the sum of its
// in-cache time and ReLU's memory time (7.5 + 4.7 ns a vector), 54% of the read bandwidth; 4 KiB
// ahead it takes 8.3 ns, 85-93% (1 KiB and 16 KiB ahead measured slower). Prefetches never
// fault, so reaching past the end is harmless.
constexpr std::size_t kPrefetchFloats = 1024;

template <class V>
typename V::F load_and_prefetch(const float* p) {
  __builtin_prefetch(p + kPrefetchFloats, 0, 3);
  return V::load(p);
}

template <class V, class Op>
void map_unary(const float* x, float* out, std::size_t n, Op op) {
  map_into<V>(
      out, n, [&](std::size_t i) { return op(load_and_prefetch<V>(x + i)); },
      [&](std::size_t i, std::size_t lanes) { return op(V::load_partial(x + i, lanes)); });
}

template <class V, class Op>
void map_binary(const float* a, const float* b, float* out, std::size_t n, Op op) {
  map_into<V>(
      out, n, [&](std::size_t i) { return op(load_and_prefetch<V>(a + i), load_and_prefetch<V>(b + i)); },
      [&](std::size_t i, std::size_t lanes) {
        return op(V::load_partial(a + i, lanes), V::load_partial(b + i, lanes));
      });
}

// Sum of op(x[i]) with four accumulators (hides add latency). Beyond the caches the four walk
// the four quarters of x side by side: four memory streams, which the prefetchers follow at the
// machine's bandwidth where one stream reached about two thirds of it. f32_sum is also the
// bandwidth roof's probe (measure_peaks.cpp), which this made read 15-16 -> 18-20 GB/s here.
template <class V, class Op>
float reduce_sum(const float* x, std::size_t n, Op op) {
  constexpr std::size_t W = V::kWidth;
  auto s0 = V::zero(), s1 = V::zero(), s2 = V::zero(), s3 = V::zero();
  std::size_t i = 0;
  if (n * sizeof(float) >= (std::size_t{4} << 20)) {
    const std::size_t quarter = n / 4 / W * W;
    const float *x1 = x + quarter, *x2 = x + 2 * quarter, *x3 = x + 3 * quarter;
    for (std::size_t j = 0; j < quarter; j += W) {
      s0 = V::add(s0, op(V::load(x + j)));
      s1 = V::add(s1, op(V::load(x1 + j)));
      s2 = V::add(s2, op(V::load(x2 + j)));
      s3 = V::add(s3, op(V::load(x3 + j)));
    }
    i = 4 * quarter;
  }
  for (; i + 4 * W <= n; i += 4 * W) {
    s0 = V::add(s0, op(V::load(x + i)));
    s1 = V::add(s1, op(V::load(x + i + W)));
    s2 = V::add(s2, op(V::load(x + i + 2 * W)));
    s3 = V::add(s3, op(V::load(x + i + 3 * W)));
  }
  for (; i + W <= n; i += W) s0 = V::add(s0, op(V::load(x + i)));
  if (i < n) {
    // Masked-off lanes load 0, which op may map to non-zero: zero them after op.
    const auto tail = op(V::load_partial(x + i, n - i));
    float lanes[V::kWidth] = {};
    V::store_partial(lanes, tail, n - i);
    s1 = V::add(s1, V::load(lanes));
  }
  return V::reduce_add(V::add(V::add(s0, s1), V::add(s2, s3)));
}

// The maximum of x, on two chains. Beyond the caches, four memory streams as reduce_sum: 64 MiB
// on one thread ran at 76% of the read bandwidth in one stream (BM_reduce/max) where the sum's
// four reach 100-112%.
template <class V>
float reduce_max(const float* x, std::size_t n) {
  constexpr std::size_t W = V::kWidth;
  auto m0 = V::set1(-__builtin_inff()), m1 = m0;
  std::size_t i = 0;
  if (n * sizeof(float) >= (std::size_t{4} << 20)) {
    auto m2 = m0, m3 = m0;
    const std::size_t quarter = n / 4 / W * W;
    const float *x1 = x + quarter, *x2 = x + 2 * quarter, *x3 = x + 3 * quarter;
    for (std::size_t j = 0; j < quarter; j += W) {
      m0 = V::max(m0, V::load(x + j));
      m1 = V::max(m1, V::load(x1 + j));
      m2 = V::max(m2, V::load(x2 + j));
      m3 = V::max(m3, V::load(x3 + j));
    }
    m0 = V::max(m0, m2);
    m1 = V::max(m1, m3);
    i = 4 * quarter;
  }
  for (; i + 2 * W <= n; i += 2 * W) {
    m0 = V::max(m0, V::load(x + i));
    m1 = V::max(m1, V::load(x + i + W));
  }
  if (i + W <= n) {
    m0 = V::max(m0, V::load(x + i));
    i += W;
  }
  float best = V::reduce_max(V::max(m0, m1));
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  return best;
}

}  // namespace
}  // namespace cpudl::kernels

namespace cpudl::kernels {
namespace {

// Calls body(offset, lanes) over [0, n) in vectors: lanes == V::kWidth except for the tail.
template <class V, class Body>
void for_vectors(std::size_t n, Body body) {
  std::size_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) body(i, std::size_t{V::kWidth});
  if (i < n) body(i, n - i);
}

template <class V>
typename V::F load_n(const float* p, std::size_t lanes) {
  return lanes == V::kWidth ? V::load(p) : V::load_partial(p, lanes);
}

template <class V>
void store_n(float* p, typename V::F v, std::size_t lanes) {
  if (lanes == V::kWidth)
    V::store(p, v);
  else
    V::store_partial(p, v, lanes);
}

// One row of a row-wise kernel: out[0, n) = value(i, lanes), called once per vector in order
// (lanes < V::kWidth at the ends only), so value may also update other arrays (layer norm's
// dgamma and dbeta). Streamed when `stream` (stream_into: the caller fences once per call),
// stored otherwise.
template <class V, class Value>
void write_row(bool stream, float* out, std::size_t n, Value value) {
  if (stream && stream_into<V>(
                    out, n, [&](std::size_t i) { return value(i, std::size_t{V::kWidth}); }, value))
    return;
  for_vectors<V>(n, [&](std::size_t i, std::size_t lanes) { store_n<V>(out + i, value(i, lanes), lanes); });
}

}  // namespace
}  // namespace cpudl::kernels
