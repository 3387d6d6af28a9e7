// Reference dynamic int8 kernels: plain loops over the packed layout, the oracle for the SIMD
// variants; and the packing itself, which every variant shares.
#include <algorithm>
#include <cmath>

#include "cpudl/runtime.h"
#include "kernels/int8/int8.h"

namespace cpudl::kernels {

namespace {
std::size_t padded_k(std::size_t k) { return (k + 3) / 4 * 4; }
std::size_t packed_index(std::size_t k4, std::size_t k, std::size_t n) {
  return (n / 8) * k4 * 8 + (k / 4) * 32 + (n % 8) * 4 + k % 4;
}
}  // namespace

std::size_t u8s8_packed_bytes(std::size_t k, std::size_t n) { return padded_k(k) * ((n + 7) / 8 * 8); }

bool u8s8_gemm_takes_minus_128(IsaLevel level) {
  return level == IsaLevel::generic || level >= IsaLevel::avx512_vnni;
}

void prepare_u8s8_rows(const std::uint8_t* a, std::size_t m, std::size_t k, std::size_t lda,
                       std::uint8_t* raw, std::int8_t* shifted, std::uint8_t* magnitude, std::size_t ld) {
  for (std::size_t i = 0; i < m; ++i) {
    std::uint8_t* r = raw + i * ld;
    std::int8_t* s = shifted + i * ld;
    std::uint8_t* g = magnitude + i * ld;
    for (std::size_t q = 0; q < k; ++q) {
      const int v = static_cast<int>(a[i * lda + q]) - 128;
      r[q] = a[i * lda + q];
      s[q] = static_cast<std::int8_t>(v);
      g[q] = static_cast<std::uint8_t>(v < 0 ? -v : v);
    }
    for (std::size_t q = k; q < padded_k(k); ++q) r[q] = 0, s[q] = 0, g[q] = 0;
  }
}

U8S8WeightRange pack_u8s8_weights(const std::int8_t* b, std::size_t ldb, std::size_t k, std::size_t n,
                                  std::int8_t* packed, std::int32_t* col_sums) {
  const std::size_t k4 = padded_k(k);
  std::fill(packed, packed + u8s8_packed_bytes(k, n), std::int8_t{0});
  std::fill(col_sums, col_sums + n, 0);
  int lo = 0, hi = 0;
  for (std::size_t kk = 0; kk < k; ++kk)
    for (std::size_t nn = 0; nn < n; ++nn) {
      const std::int8_t v = b[kk * ldb + nn];
      packed[packed_index(k4, kk, nn)] = v;
      col_sums[nn] += v;
      lo = std::min<int>(lo, v);
      hi = std::max<int>(hi, v);
    }
  if (lo == -128) return U8S8WeightRange::with_minus_128;
  return lo >= -64 && hi <= 63 ? U8S8WeightRange::seven_bit : U8S8WeightRange::eight_bit;
}

U8QuantParams u8_quant_params(float lo, float hi) {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  U8QuantParams p;
  p.scale = (hi - lo) / 255.0f;
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale)) return U8QuantParams{};
  p.zero = static_cast<std::int32_t>(std::nearbyint(std::clamp(-lo / p.scale, 0.0f, 255.0f)));
  return p;
}

void u8s8_gemm__ref(const U8S8GemmArgs& g) {
  const std::size_t k4 = padded_k(g.k);
  for (std::size_t m = 0; m < g.m; ++m)
    for (std::size_t n = g.n_begin; n < g.n_end; ++n) {
      // In 64 bits: sum a b and a_zero sum b may each leave int32 when K is near its limit of
      // 65535, though their difference (the product of a - a_zero and b) never does.
      std::int64_t sum = 0;
      for (std::size_t kk = 0; kk < g.k; ++kk)
        sum += static_cast<std::int64_t>(g.a[m * g.lda + kk]) * g.b_packed[packed_index(k4, kk, n)];
      const auto total =
          static_cast<std::int32_t>(sum - static_cast<std::int64_t>(g.a_zero) * g.b_col_sums[n]);
      const float scale = g.a_scale * g.b_scale[g.b_scale_per_column ? n : 0];
      float y = static_cast<float>(total) * scale;
      if (g.bias) y += g.bias[n];
      if (g.relu) y = std::max(y, 0.0f);
      g.c[m * g.ldc + n] = y;
    }
}

void f32_min_max__ref(const float* x, std::size_t n, float* lo, float* hi) {
  float a = x[0], b = x[0];
  for (std::size_t i = 1; i < n; ++i) {
    a = std::min(a, x[i]);
    b = std::max(b, x[i]);
  }
  *lo = a;
  *hi = b;
}

void f32_quantize_u8__ref(const float* x, std::size_t n, float scale, std::int32_t zero, std::uint8_t* y) {
  for (std::size_t i = 0; i < n; ++i) {
    // nearbyint rounds half to even in the default rounding mode, as ONNX's QuantizeLinear does.
    float v = std::nearbyint(x[i] / scale) + static_cast<float>(zero);
    if (!(v >= 0.0f)) v = 0.0f;  // also NaN
    y[i] = static_cast<std::uint8_t>(std::min(v, 255.0f));
  }
}

}  // namespace cpudl::kernels
