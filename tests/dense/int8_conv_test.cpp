// oneDNN's int8 convolution (dense.h: Int8Convolution) against a direct loop in double that
// follows the QDQ definitions: DequantizeLinear of the u8 source and the s8 weights, the float
// convolution with its padding (zeros in real values), bias, residual, activation, then
// QuantizeLinear for a u8 output. Windows, groups, layouts and zero points as ResNet-18 and
// MobileNet-v2 have them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/onednn/dense.h"
#include "dense_reference.h"

namespace cpudl::onednn {
namespace {

struct Case {
  const char* name;
  ConvShape shape;
  std::int32_t src_zero = 0;
  bool per_channel = true, u8_output = false, residual = false;
  Activation activation = Activation::none;
  std::int32_t dst_zero = 0;
};

ConvShape conv(std::int64_t n, std::int64_t c, std::int64_t hw, std::int64_t o, std::int64_t k,
               std::int64_t stride, std::int64_t pad, std::int64_t groups = 1,
               ActivationLayout layout = ActivationLayout::nhwc) {
  ConvShape s;
  s.batch = n;
  s.in_channels = c;
  s.height = s.width = hw;
  s.out_channels = o;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.groups = groups;
  s.layout = layout;
  s.dst_layout = ActivationLayout::nhwc;
  return s;
}

// NCHW index -> the layout's.
std::size_t at(ActivationLayout layout, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
               std::int64_t channels, std::int64_t height, std::int64_t width) {
  if (layout == ActivationLayout::nhwc)
    return static_cast<std::size_t>(((n * height + h) * width + w) * channels + c);
  return static_cast<std::size_t>(((n * channels + c) * height + h) * width + w);
}

void check(const Case& c) {
  SCOPED_TRACE(c.name);
  const ConvShape& s = c.shape;
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  std::mt19937 gen(7);
  // Full-range weights where the CPU sums them exactly, 7-bit ones (VPMADDUBSW-safe) elsewhere.
  const int w_max = runtime().isa.active >= IsaLevel::avx512_vnni ? 127 : 64;
  std::uniform_int_distribution<int> u8(0, 255), s8(-w_max, w_max);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::vector<std::uint8_t> x(static_cast<std::size_t>(s.batch * s.in_channels * s.height * s.width));
  for (auto& v : x) v = static_cast<std::uint8_t>(u8(gen));
  std::vector<std::int8_t> w(
      static_cast<std::size_t>(s.out_channels * s.in_channels / s.groups * s.kernel_h * s.kernel_w));
  for (auto& v : w) v = static_cast<std::int8_t>(s8(gen));
  std::vector<float> bias(static_cast<std::size_t>(s.out_channels));
  for (auto& v : bias) v = real(gen);
  const std::size_t outputs = static_cast<std::size_t>(s.batch * s.out_channels * oh * ow);
  std::vector<float> residual(outputs);
  for (auto& v : residual) v = real(gen);
  // A uint8 output adds a uint8 residual (keep_activations_in_int8): its real value is
  // residual_scale * (r - residual_zero).
  std::vector<std::uint8_t> residual_u8(outputs);
  for (auto& v : residual_u8) v = static_cast<std::uint8_t>(u8(gen));

  Int8ConvSpec spec;
  spec.shape = s;
  spec.src_scale = 0.02f;
  spec.src_zero = c.src_zero;
  spec.weight_scales.assign(c.per_channel ? static_cast<std::size_t>(s.out_channels) : 1u, 0.003f);
  for (std::size_t i = 0; i < spec.weight_scales.size(); ++i)
    spec.weight_scales[i] *= 1.0f + 0.1f * static_cast<float>(i % 7);
  spec.u8_output = c.u8_output;
  spec.residual = c.residual;
  spec.activation = c.activation;
  spec.clip_min = 0.0f;
  spec.clip_max = 6.0f;
  spec.dst_zero = c.dst_zero;
  spec.residual_scale = 0.004f;
  spec.residual_zero = 9;

  // The reference, in double; the output's real scale sets the u8 step so that it spans [0, 255].
  std::vector<double> want(outputs, 0.0);
  reference::for_each_conv_tap(s, [&](auto n, auto oc, auto h, auto wo, auto ic, auto icl, auto kh, auto kw,
                                      auto ih, auto iw) {
    const double xv =
        (static_cast<double>(x[at(s.layout, n, ic, ih, iw, s.in_channels, s.height, s.width)]) - c.src_zero) *
        spec.src_scale;
    const double ws = spec.weight_scales[spec.weight_scales.size() == 1 ? 0 : static_cast<std::size_t>(oc)];
    want[at(ActivationLayout::nhwc, n, oc, h, wo, s.out_channels, oh, ow)] +=
        xv * w[reference::weight_index(s, oc, icl, kh, kw)] * ws;
  });
  double hi = 0;
  for (std::size_t i = 0; i < outputs; ++i) {
    const std::size_t oc = i % static_cast<std::size_t>(s.out_channels);  // NHWC
    const double r = c.u8_output
                         ? spec.residual_scale * (static_cast<double>(residual_u8[i]) - spec.residual_zero)
                         : residual[i];
    want[i] += bias[oc] + (c.residual ? r : 0.0);
    if (c.activation == Activation::relu) want[i] = std::max(want[i], 0.0);
    if (c.activation == Activation::clip) want[i] = std::clamp(want[i], 0.0, 6.0);
    if (c.activation == Activation::swish) want[i] = want[i] / (1.0 + std::exp(-want[i]));
    hi = std::max(hi, std::fabs(want[i]));
  }
  spec.dst_scale = static_cast<float>(hi / 200.0);

  Int8Convolution op(spec, w.data(), bias.data());
  EXPECT_FALSE(op.implementation().empty());
  if (c.u8_output) {
    std::vector<std::uint8_t> y(outputs);
    op.run(x.data(), y.data(), c.residual ? residual_u8.data() : nullptr);
    int off_by_one = 0;
    for (std::size_t i = 0; i < outputs; ++i) {
      const double q = std::clamp(std::nearbyint(want[i] / spec.dst_scale) + spec.dst_zero, 0.0, 255.0);
      // float sums differ from double ones only at a rounding boundary: one step, rarely
      ASSERT_LE(std::fabs(y[i] - q), 1.0)
          << c.name << ": element " << i << " is " << int(y[i]) << ", expected " << q;
      off_by_one += y[i] != q;
    }
    EXPECT_LE(off_by_one, static_cast<int>(outputs / 100 + 1));
  } else {
    std::vector<float> y(outputs);
    op.run(x.data(), y.data(), c.residual ? residual.data() : nullptr);
    for (std::size_t i = 0; i < outputs; ++i) ASSERT_NEAR(y[i], want[i], 1e-4 * (1.0 + hi)) << i;
  }
}

TEST(Int8Convolution, MatchesTheQdqReferenceAcrossWindowsGroupsLayoutsAndZeroPoints) {
  const Case cases[] = {
      {"3x3 u8 -> u8 relu (ResNet body)", conv(2, 32, 10, 48, 3, 1, 1), 0, true, true, false,
       Activation::relu},
      {"3x3 stride 2 -> f32 + residual + relu", conv(2, 32, 9, 16, 3, 2, 1), 0, true, false, true,
       Activation::relu},
      {"3x3 -> u8 + u8 residual + relu (ResNet block end)", conv(2, 32, 9, 48, 3, 1, 1), 0, true, true, true,
       Activation::relu},
      {"1x1 -> u8 + u8 residual, zero point (MobileNet-v2 block end)", conv(4, 144, 28, 24, 1, 1, 0), 0, true,
       true, true, Activation::none, 100},
      {"7x7 stride 2 NCHW source zero point (first layer)",
       conv(1, 3, 17, 16, 7, 2, 3, 1, ActivationLayout::nchw), 117, true, true, false, Activation::relu},
      {"1x1 stride 2 per-tensor -> f32", conv(2, 16, 8, 32, 1, 2, 0), 0, false},
      {"depthwise 3x3 clip -> u8", conv(2, 24, 7, 24, 3, 1, 1, 24), 0, true, true, false, Activation::clip},
      {"1x1 -> u8 with a zero point (linear bottleneck)", conv(2, 24, 6, 16, 1, 1, 0), 0, true, true, false,
       Activation::none, 128},
      {"3x3 zero-point source with padding -> f32", conv(1, 8, 5, 8, 3, 1, 1), 200, true, false},
      {"3x3 SiLU -> u8 with a zero point (YOLO's Conv-BN-SiLU)", conv(2, 16, 8, 32, 3, 1, 1), 0, true, true,
       false, Activation::swish, 20},
      {"1x1 SiLU -> f32", conv(2, 16, 6, 16, 1, 1, 0), 0, true, false, false, Activation::swish},
  };
  for (const Case& c : cases) check(c);
}

TEST(Int8Convolution, RefusesWhatItCannotCompute) {
  Int8ConvSpec spec;
  spec.shape = conv(1, 4, 4, 4, 3, 1, 1);
  spec.weight_scales = {1.0f, 1.0f};  // neither 1 nor 4
  std::vector<std::int8_t> w(4 * 4 * 9);
  EXPECT_THROW(Int8Convolution(spec, w.data(), nullptr), Error);
  spec.weight_scales = {1.0f};
  spec.u8_output = true;
  spec.residual = true;
  spec.residual_scale = 0.0f;  // a uint8 residual needs its scale
  EXPECT_THROW(Int8Convolution(spec, w.data(), nullptr), Error);
  spec.residual = false;
  spec.shape.dst_layout = ActivationLayout::blocked;
  EXPECT_THROW(Int8Convolution(spec, w.data(), nullptr), Error);
  // VPMADDUBSW's saturation: full-range weights are exact only with VNNI.
  const std::vector<std::int8_t> seven_bit = {64, -64, 3}, full = {127, -128};
  EXPECT_TRUE(int8_convolution_exact(seven_bit));
  EXPECT_EQ(int8_convolution_exact(full), runtime().isa.active >= IsaLevel::avx512_vnni);
}

}  // namespace
}  // namespace cpudl::onednn
