// Row conversions for the GGUF block formats. The quantisers are min-max (Q4_K, Q6_K) or
// max-abs (Q8_0, Q4_0) per block, the way ggml's reference quantisers start; ggml then searches
// scales to lower the error a little further (make_qkx2_quants), which cpudl does not (yet).
#include "llm/gguf/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cpudl/error.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"

namespace cpudl::llm {

bool is_compute_type(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
    case GgmlType::f16:
    case GgmlType::bf16:
    case GgmlType::q8_0:
    case GgmlType::q4_0:
    case GgmlType::q4_k:
    case GgmlType::q6_k:
      return true;
    default:
      return false;
  }
}

std::size_t row_bytes(GgmlType type, std::size_t k) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<std::uint32_t>(type));
  return k / info->block_size * info->block_bytes;
}

namespace {

int nearest(float x) { return static_cast<int>(std::lround(x)); }

void quantize_q4_k(const float* x, BlockQ4_K& b) {
  float scales[8], mins[8];
  for (int j = 0; j < 8; ++j) {
    float lo = 0, hi = 0;  // the min is kept <= 0, so zero stays exact
    for (int i = 0; i < 32; ++i) {
      lo = std::min(lo, x[32 * j + i]);
      hi = std::max(hi, x[32 * j + i]);
    }
    scales[j] = (hi - lo) / 15.0f;
    mins[j] = -lo;
  }
  const float max_scale = *std::max_element(scales, scales + 8), max_min = *std::max_element(mins, mins + 8);
  const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
  b.d = f32_to_fp16(d);
  b.dmin = f32_to_fp16(dmin);
  const float d_stored = fp16_to_f32(b.d), dmin_stored = fp16_to_f32(b.dmin);
  std::memset(b.scales, 0, sizeof b.scales);
  int sc_of[8], m_of[8];
  for (int j = 0; j < 8; ++j) {
    const int sc = sc_of[j] = d_stored > 0 ? std::clamp(nearest(scales[j] / d_stored), 0, 63) : 0;
    const int m = m_of[j] = dmin_stored > 0 ? std::clamp(nearest(mins[j] / dmin_stored), 0, 63) : 0;
    if (j < 4) {
      b.scales[j] = static_cast<std::uint8_t>(sc);
      b.scales[j + 4] = static_cast<std::uint8_t>(m);
    } else {
      b.scales[j + 4] = static_cast<std::uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
      b.scales[j - 4] |= static_cast<std::uint8_t>((sc >> 4) << 6);
      b.scales[j] |= static_cast<std::uint8_t>((m >> 4) << 6);
    }
  }
  std::memset(b.qs, 0, sizeof b.qs);
  for (int j = 0; j < 8; ++j) {
    const float step = d_stored * static_cast<float>(sc_of[j]),
                offset = dmin_stored * static_cast<float>(m_of[j]);
    for (int i = 0; i < 32; ++i) {
      const int q = step > 0 ? std::clamp(nearest((x[32 * j + i] + offset) / step), 0, 15) : 0;
      b.qs[(j / 2) * 32 + i] |= static_cast<std::uint8_t>(j % 2 == 0 ? q : q << 4);
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K& b) {
  float group_scale[16];
  float max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    float amax = 0;
    for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * g + i]));
    group_scale[g] = amax / 31.0f;
    max_abs_scale = std::max(max_abs_scale, group_scale[g]);
  }
  const float d = max_abs_scale / 127.0f;
  b.d = f32_to_fp16(d);
  const float d_stored = fp16_to_f32(b.d);
  int q[256];
  for (int g = 0; g < 16; ++g) {
    const int sc = d_stored > 0 ? std::clamp(nearest(group_scale[g] / d_stored), 0, 127) : 0;
    b.scales[g] = static_cast<std::int8_t>(sc);
    const float step = d_stored * static_cast<float>(sc);
    for (int i = 0; i < 16; ++i)
      q[16 * g + i] = (step > 0 ? std::clamp(nearest(x[16 * g + i] / step), -32, 31) : 0) + 32;
  }
  for (int half = 0; half < 2; ++half)
    for (int l = 0; l < 32; ++l) {
      const int* v = q + 128 * half;
      b.ql[64 * half + l] = static_cast<std::uint8_t>((v[l] & 0xF) | ((v[l + 64] & 0xF) << 4));
      b.ql[64 * half + l + 32] = static_cast<std::uint8_t>((v[l + 32] & 0xF) | ((v[l + 96] & 0xF) << 4));
      b.qh[32 * half + l] = static_cast<std::uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) |
                                                      ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
    }
}

}  // namespace

void dequantize_row(GgmlType type, const void* in, float* out, std::size_t k) {
  const kernels::KernelTable& t = kernels::kernel_table();
  switch (type) {
    case GgmlType::f32:
      std::memcpy(out, in, k * sizeof(float));
      return;
    case GgmlType::f16:
      t.dequantize_row_f16.fn(in, out, k);
      return;
    case GgmlType::bf16:
      t.dequantize_row_bf16.fn(in, out, k);
      return;
    case GgmlType::q8_0:
      t.dequantize_row_q8_0.fn(in, out, k);
      return;
    case GgmlType::q4_0:
      t.dequantize_row_q4_0.fn(in, out, k);
      return;
    case GgmlType::q4_k:
      t.dequantize_row_q4_k.fn(in, out, k);
      return;
    case GgmlType::q6_k:
      t.dequantize_row_q6_k.fn(in, out, k);
      return;
    default: {
      const GgmlTypeInfo* info = ggml_type_info(static_cast<std::uint32_t>(type));
      throw Error(std::string("cannot dequantise tensor type ") + (info ? info->name : "?"));
    }
  }
}

void quantize_row(GgmlType type, const float* in, void* out, std::size_t k) {
  switch (type) {
    case GgmlType::f32:
      std::memcpy(out, in, k * sizeof(float));
      return;
    case GgmlType::f16:
      for (std::size_t i = 0; i < k; ++i) static_cast<std::uint16_t*>(out)[i] = f32_to_fp16(in[i]);
      return;
    case GgmlType::bf16:
      for (std::size_t i = 0; i < k; ++i) static_cast<std::uint16_t*>(out)[i] = f32_to_bf16(in[i]);
      return;
    case GgmlType::q8_0:
      for (std::size_t b = 0; b < k / 32; ++b) {
        auto& blk = static_cast<BlockQ8_0*>(out)[b];
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(in[32 * b + i]));
        const float d = amax / 127.0f, inv = d != 0 ? 1.0f / d : 0.0f;
        blk.d = f32_to_fp16(d);
        for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<std::int8_t>(nearest(in[32 * b + i] * inv));
      }
      return;
    case GgmlType::q4_0:
      // The signed value of largest magnitude maps to -8, so it is represented exactly.
      for (std::size_t b = 0; b < k / 32; ++b) {
        auto& blk = static_cast<BlockQ4_0*>(out)[b];
        float amax = 0, max = 0;
        for (int i = 0; i < 32; ++i)
          if (std::fabs(in[32 * b + i]) > amax) {
            amax = std::fabs(in[32 * b + i]);
            max = in[32 * b + i];
          }
        const float d = max / -8.0f, inv = d != 0 ? 1.0f / d : 0.0f;
        blk.d = f32_to_fp16(d);
        for (int i = 0; i < 16; ++i) {
          const int lo = std::min(15, static_cast<int>(in[32 * b + i] * inv + 8.5f));
          const int hi = std::min(15, static_cast<int>(in[32 * b + i + 16] * inv + 8.5f));
          blk.qs[i] = static_cast<std::uint8_t>(lo | (hi << 4));
        }
      }
      return;
    case GgmlType::q4_k:
      for (std::size_t b = 0; b < k / 256; ++b) quantize_q4_k(in + 256 * b, static_cast<BlockQ4_K*>(out)[b]);
      return;
    case GgmlType::q6_k:
      for (std::size_t b = 0; b < k / 256; ++b) quantize_q6_k(in + 256 * b, static_cast<BlockQ6_K*>(out)[b]);
      return;
    default: {
      const GgmlTypeInfo* info = ggml_type_info(static_cast<std::uint32_t>(type));
      throw Error(std::string("cannot quantise to tensor type ") + (info ? info->name : "?"));
    }
  }
}

}  // namespace cpudl::llm
