// Convolutions as one matrix product when every window covers the whole map (conv_as_linear.h).
#include "dense/conv/conv_as_linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dense/onednn/dense.h"
#include "runtime/parallel.h"

namespace cpudl::conv {

namespace {

// E's size cap (floats): the product must stay a small multiple of the weights it expands.
constexpr std::int64_t kMaxExpandedFloats = std::int64_t{1} << 24;

bool covers(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t pad) {
  for (std::int64_t o = 0; o < out; ++o) {
    const std::int64_t first = o * stride - pad;
    if (first > 0 || first + kernel < in) return false;
  }
  return true;
}

struct Dims {
  std::int64_t positions_in, positions_out, in, out, taps;
};
Dims dims(const dense::ConvShape& s) {
  const std::int64_t pin = s.height * s.width, pout = s.out_height() * s.out_width();
  return {pin, pout, pin * s.in_channels, pout * s.out_channels, s.kernel_h * s.kernel_w};
}

// The kernel tap joining output position p to input position q.
std::int64_t tap(const dense::ConvShape& s, std::int64_t p, std::int64_t q) {
  const std::int64_t oh = p / s.out_width(), ow = p % s.out_width(), ih = q / s.width, iw = q % s.width;
  return (ih - oh * s.stride_h + s.pad_h) * s.kernel_w + (iw - ow * s.stride_w + s.pad_w);
}

onednn::LinearShape linear_shape(const dense::ConvShape& s, bool bf16) {
  const Dims d = dims(s);
  return {s.batch, d.in, d.out, bf16};
}

}  // namespace

bool conv_covers_whole_map(const dense::ConvShape& s) {
  if (s.groups != 1 || s.dilation_h != 1 || s.dilation_w != 1) return false;
  const Dims d = dims(s);
  return d.in * d.out <= kMaxExpandedFloats &&
         covers(s.height, s.out_height(), s.kernel_h, s.stride_h, s.pad_h) &&
         covers(s.width, s.out_width(), s.kernel_w, s.stride_w, s.pad_w);
}

void expand_weights(const dense::ConvShape& s, const float* w, ExpandedWeights& e) {
  const Dims d = dims(s);
  const std::int64_t ic_n = s.in_channels, oc_n = s.out_channels, taps = d.taps;
  e.storage = AlignedArray(static_cast<std::size_t>(d.out * d.in));
  float* pe = e.storage.data();
  e.data = pe;
  // Row (p, oc) of E gathers output channel oc's kernel (IC x full taps, at most 18 KB for
  // ResNet-18's 512 x 512 x 3 x 3: it stays in L1/L2 while read with a stride of full_taps).
  parallel_for(static_cast<std::size_t>(d.out), 16, [&](std::size_t r0, std::size_t r1) {
    for (auto row = static_cast<std::int64_t>(r0); row < static_cast<std::int64_t>(r1); ++row) {
      const std::int64_t p = row / oc_n, oc = row % oc_n;
      const float* kernel = w + oc * ic_n * taps;
      for (std::int64_t q = 0; q < d.positions_in; ++q) {
        const float* src = kernel + tap(s, p, q);
        float* dst = pe + row * d.in + q * ic_n;
        for (std::int64_t ic = 0; ic < ic_n; ++ic) dst[ic] = src[ic * taps];
      }
    }
  });
}

void conv_as_linear_forward(const dense::ConvShape& s, const float* x, const float* expanded,
                            const float* bias, bool relu, float* y, bool bf16) {
  const Dims d = dims(s);
  std::vector<float> bias_rows;
  if (bias) {
    bias_rows.resize(static_cast<std::size_t>(d.out));
    for (std::int64_t p = 0; p < d.positions_out; ++p)
      std::memcpy(bias_rows.data() + p * s.out_channels, bias, static_cast<std::size_t>(s.out_channels) * 4);
  }
  onednn::linear_forward(linear_shape(s, bf16), x, expanded, bias ? bias_rows.data() : nullptr, y,
                         relu ? onednn::Activation::relu : onednn::Activation::none);
}

void conv_as_linear_backward_data(const dense::ConvShape& s, const float* dy, const float* expanded,
                                  float* dx, bool bf16) {
  onednn::linear_backward_data(linear_shape(s, bf16), dy, expanded, dx);
}

void conv_as_linear_backward_weights(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                                     float* db, bool bf16) {
  const Dims d = dims(s);
  const std::int64_t ic_n = s.in_channels, oc_n = s.out_channels;
  // Written whole by oneDNN: no zero-fill (E's gradient is as large as E: 4 MB for ResNet-18's
  // 2x2 maps). Kept per thread between calls: a fresh block this size would page-fault each step.
  thread_local AlignedBuffer de_buffer;
  float* de = de_buffer.get(static_cast<std::size_t>(d.out * d.in));
  std::vector<float> db_rows(db ? static_cast<std::size_t>(d.out) : 0);
  onednn::linear_backward_weights(linear_shape(s, bf16), x, dy, de, db ? db_rows.data() : nullptr);
  // Fold E's gradient onto the kernel: each tap sums the blocks (p, q) it joins, in a fixed
  // order; threads own output channels.
  parallel_for(static_cast<std::size_t>(oc_n), 4, [&](std::size_t o0, std::size_t o1) {
    std::vector<float> by_tap(static_cast<std::size_t>(d.taps * ic_n));
    for (auto oc = static_cast<std::int64_t>(o0); oc < static_cast<std::int64_t>(o1); ++oc) {
      std::fill(by_tap.begin(), by_tap.end(), 0.0f);
      for (std::int64_t p = 0; p < d.positions_out; ++p) {
        const float* row = de + (p * oc_n + oc) * d.in;
        for (std::int64_t q = 0; q < d.positions_in; ++q) {
          float* acc = by_tap.data() + tap(s, p, q) * ic_n;
          const float* block = row + q * ic_n;
          for (std::int64_t ic = 0; ic < ic_n; ++ic) acc[ic] += block[ic];
        }
      }
      float* kernel = dw + oc * ic_n * d.taps;
      for (std::int64_t ic = 0; ic < ic_n; ++ic)
        for (std::int64_t t = 0; t < d.taps; ++t) kernel[ic * d.taps + t] = by_tap[t * ic_n + ic];
    }
  });
  if (db)
    for (std::int64_t oc = 0; oc < oc_n; ++oc) {
      float acc = 0.0f;
      for (std::int64_t p = 0; p < d.positions_out; ++p) acc += db_rows[p * oc_n + oc];
      db[oc] = acc;
    }
}

}  // namespace cpudl::conv
