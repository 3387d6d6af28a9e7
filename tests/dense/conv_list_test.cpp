// Every entry of the convolution implementation list (dense/conv/conv_list.h) that can run a
// shape, on every pass it has, against the double-precision direct loops of dense_reference.h:
// a table of shapes with edges, strides, padding, dilation, groups, one channel and odd sizes,
// in each activation layout an entry takes, with and without its prepared weights. A runs() rule
// that claims a shape its algorithm gets wrong fails here; one that never claims anything fails
// the coverage check at the end.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "dense/conv/conv_list.h"
#include "dense/onednn/dense.h"
#include "dense_reference.h"

namespace cpudl::conv {
namespace {

using dense::ActivationLayout;
using dense::ConvShape;

std::vector<float> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// NCHW <-> `layout` for a batch of n x c x h x w (the blocked layout: [N][C / b][H][W][b]).
std::size_t offset(ActivationLayout layout, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                   std::int64_t channels, std::int64_t height, std::int64_t width) {
  const std::int64_t b = onednn::blocked_layout_channels();
  switch (layout) {
    case ActivationLayout::nhwc:
      return static_cast<std::size_t>(((n * height + h) * width + w) * channels + c);
    case ActivationLayout::blocked:
      return static_cast<std::size_t>((((n * (channels / b) + c / b) * height + h) * width + w) * b + c % b);
    case ActivationLayout::nchw:
      break;
  }
  return static_cast<std::size_t>(((n * channels + c) * height + h) * width + w);
}
std::vector<float> convert(const std::vector<float>& x, ActivationLayout layout, std::int64_t batch,
                           std::int64_t channels, std::int64_t height, std::int64_t width, bool to_nchw) {
  std::vector<float> y(x.size());
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t c = 0; c < channels; ++c)
      for (std::int64_t h = 0; h < height; ++h)
        for (std::int64_t w = 0; w < width; ++w) {
          const std::size_t plain = offset(ActivationLayout::nchw, n, c, h, w, channels, height, width);
          const std::size_t other = offset(layout, n, c, h, w, channels, height, width);
          if (to_nchw)
            y[plain] = x[other];
          else
            y[other] = x[plain];
        }
  return y;
}

// max |got - want| over the output's scale: rounding grows with the magnitudes summed (Winograd's
// transforms, bf16 operands), so the bound is relative to the largest output; a wrong tap or
// index misses by O(scale). NaN (an element never written) fails.
void expect_matches(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-3;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), tolerance * scale)
        << what << ": element " << i << " is " << got[i] << ", expected " << want[i] << " (scale " << scale
        << ")";
}

struct Case {
  std::int64_t batch, in, h, w, out, kh, kw, stride, pad, dilation, groups;
};

// Each row reaches at least one specialised entry (named on the right) besides oneDNN.
const Case kCases[] = {
    {2, 1, 12, 12, 16, 5, 5, 1, 2, 1, 1},  // planar, few_channel: a first layer
    {3, 3, 9, 11, 8, 3, 3, 1, 1, 1, 1},    // planar, few_channel: odd sizes, 8 outputs
    {2, 3, 15, 13, 64, 7, 7, 2, 3, 1, 1},  // tap_gemm: a strided stem
    {2, 16, 9, 7, 32, 3, 3, 1, 1, 1, 1},   // winograd: tile edges
    {2, 32, 8, 8, 32, 3, 3, 1, 0, 1, 1},   // winograd: no padding
    {2, 64, 8, 8, 128, 3, 3, 2, 1, 1, 1},  // tap_gemm, implicit_gemm: strided 3x3
    {2, 64, 7, 7, 128, 1, 1, 2, 0, 1, 1},  // pointwise: a strided shortcut, odd map
    {2, 64, 6, 5, 64, 1, 1, 1, 0, 1, 1},   // pointwise: stride 1
    {2, 32, 2, 2, 16, 3, 3, 1, 1, 1, 1},   // conv_as_linear: windows cover the map
    {3, 16, 1, 1, 32, 3, 3, 1, 1, 1, 1},   // conv_as_linear: a 1x1 map
    {2, 16, 3, 3, 16, 3, 3, 2, 1, 1, 1},   // conv_as_linear: strided on a small map
    {2, 8, 10, 9, 8, 3, 3, 1, 2, 2, 1},    // dilation
    {2, 16, 8, 8, 32, 3, 3, 1, 1, 1, 4},   // groups
    {1, 1, 5, 5, 1, 3, 3, 1, 0, 1, 1},     // one channel in and out
    {2, 16, 7, 9, 16, 3, 2, 2, 1, 1, 1},   // a 3x2 kernel, stride 2
};

TEST(ConvList, EveryEntryThatRunsAShapeMatchesTheReference) {
  std::map<std::string, int> ran;
  for (const Case& t : kCases) {
    ConvShape s;
    s.batch = t.batch, s.in_channels = t.in, s.height = t.h, s.width = t.w, s.out_channels = t.out;
    s.kernel_h = t.kh, s.kernel_w = t.kw, s.stride_h = s.stride_w = t.stride, s.pad_h = s.pad_w = t.pad;
    s.dilation_h = s.dilation_w = t.dilation, s.groups = t.groups;
    const std::int64_t oh = s.out_height(), ow = s.out_width();
    const auto x = random_vector(static_cast<std::size_t>(t.batch * t.in * t.h * t.w), 1);
    const auto w = random_vector(static_cast<std::size_t>(t.out * (t.in / t.groups) * t.kh * t.kw), 2);
    const auto bias = random_vector(static_cast<std::size_t>(t.out), 3);
    const auto dy = random_vector(static_cast<std::size_t>(t.batch * t.out * oh * ow), 4);
    const auto y_want = reference::conv2d_forward(s, x, w, &bias);
    std::vector<float> relu_want = y_want;
    for (float& v : relu_want) v = std::max(v, 0.0f);
    const auto dx_want = reference::conv2d_backward_data(s, dy, w);
    std::vector<float> db_want;
    const auto dw_want = reference::conv2d_backward_weights(s, x, dy, &db_want);
    const std::int64_t block = onednn::blocked_layout_channels();
    for (ActivationLayout layout :
         {ActivationLayout::nhwc, ActivationLayout::nchw, ActivationLayout::blocked}) {
      if (layout == ActivationLayout::blocked && (t.in % block != 0 || t.out % block != 0)) continue;
      ConvShape ls = s;
      ls.layout = layout;
      const auto x_in = convert(x, layout, t.batch, t.in, t.h, t.w, false);
      const auto dy_in = convert(dy, layout, t.batch, t.out, oh, ow, false);
      for (const ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weights}) {
        for (const bool relu : {false, true}) {
          if (relu && pass != ConvPass::forward) continue;
          ConvContext context;
          context.input_needs_grad = false;  // let the first-layer entries claim what they can
          context.constant_weights = layout == ActivationLayout::blocked;
          context.activation = relu ? dense::Activation::relu : dense::Activation::none;
          for (const ConvImpl& impl : conv_impls()) {
            if (!(impl.passes & pass_bit(pass)) || !impl.runs(ls, pass, context)) continue;
            const bool bf16 = impl.name.ends_with("_bf16");
            const double tolerance = bf16 ? 3e-2 : 2e-5;
            for (const bool prepare : {false, true}) {
              if (prepare && (!impl.prepare || pass == ConvPass::backward_weights)) continue;
              const std::string what = std::string(impl.name) + " " + std::string(pass_name(pass)) + " " +
                                       std::string(layout_name(layout)) + " " + dense::describe(s) +
                                       (relu ? " relu" : "") + (prepare ? " prepared" : "");
              SCOPED_TRACE(what);
              std::shared_ptr<const ConvPrepared> prepared;
              if (prepare) prepared = impl.prepare(ls, pass, w.data());
              ConvArgs a;
              a.weights = w.data(), a.prepared = prepared.get();
              if (pass == ConvPass::forward) {
                std::vector<float> y(y_want.size(), NAN);
                a.src = x_in.data(), a.bias = bias.data(), a.dst = y.data();
                a.epilogue.activation = context.activation;
                impl.run(ls, pass, a);
                expect_matches(convert(y, layout, t.batch, t.out, oh, ow, true), relu ? relu_want : y_want,
                               tolerance, what);
              } else if (pass == ConvPass::backward_data) {
                std::vector<float> dx(dx_want.size(), NAN);
                a.src = dy_in.data(), a.dst = dx.data();
                impl.run(ls, pass, a);
                expect_matches(convert(dx, layout, t.batch, t.in, t.h, t.w, true), dx_want, tolerance, what);
              } else {
                std::vector<float> dw(dw_want.size(), NAN), db(db_want.size(), NAN);
                a.src = x_in.data(), a.diff_dst = dy_in.data(), a.dst = dw.data(), a.diff_bias = db.data();
                impl.run(ls, pass, a);
                expect_matches(dw, dw_want, tolerance, what + " dw");
                expect_matches(db, db_want, tolerance, what + " db");
              }
              if (HasFatalFailure()) return;
              ++ran[std::string(impl.name)];
            }
          }
        }
      }
    }
  }
  // Every entry ran somewhere in the table, the bf16 ones where the CPU has bf16 arithmetic.
  for (const ConvImpl& impl : conv_impls()) {
    if (impl.name.ends_with("_bf16") && !onednn::bf16_compute_available()) {
      std::printf("skipping the coverage of %s: this CPU has neither AVX512-BF16 nor AMX\n",
                  std::string(impl.name).c_str());
      continue;
    }
    EXPECT_GT(ran[std::string(impl.name)], 0) << impl.name << " never ran";
  }
}

// The walk: training's choices for the shapes the rules were measured on, and the inference
// runtime's Winograd for blocked stride-1 3x3 layers with constant weights.
TEST(ConvList, TheWalkPicksTheMeasuredEntries) {
  ConvShape s;
  s.batch = 16, s.in_channels = 64, s.height = 56, s.width = 56, s.out_channels = 64;
  s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1, s.layout = ActivationLayout::nhwc;
  ConvContext training;
  EXPECT_EQ(choose_conv_impl(s, ConvPass::forward, training).name, "winograd");
  EXPECT_EQ(choose_conv_impl(s, ConvPass::backward_weights, training).name, "winograd");
  ConvContext bf16 = training;
  bf16.bf16 = true;
  if (onednn::bf16_compute_available()) {
    EXPECT_EQ(choose_conv_impl(s, ConvPass::forward, bf16).name, "onednn_bf16");
  }
  ConvShape blocked = s;
  blocked.layout = ActivationLayout::blocked;
  ConvContext inference;
  inference.constant_weights = true;
  EXPECT_EQ(choose_conv_impl(blocked, ConvPass::forward, inference).name, "winograd");
  ConvShape whole = s;  // 3x3 on a 2x2 map: one matrix product
  whole.height = whole.width = 2, whole.in_channels = whole.out_channels = 512;
  EXPECT_EQ(choose_conv_impl(whole, ConvPass::forward, training).name, "conv_as_linear");
  EXPECT_EQ(choose_conv_impl(whole, ConvPass::backward_data, training).name, "conv_as_linear");
  ConvShape first = s;  // a first layer whose images need no gradient
  first.in_channels = 1, first.out_channels = 32, first.height = first.width = 28;
  ConvContext images = training;
  images.input_needs_grad = false;
  EXPECT_EQ(choose_conv_impl(first, ConvPass::forward, images).name, "planar");
  EXPECT_EQ(choose_conv_impl(first, ConvPass::forward, training).name, "onednn");
  EXPECT_EQ(choose_conv_impl(first, ConvPass::backward_weights, training).name, "few_channel");
  ConvShape grouped = s;
  grouped.groups = 4;
  EXPECT_EQ(choose_conv_impl(grouped, ConvPass::forward, training).name, "onednn");
  // The reference is never the walk's choice.
  for (const ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weights})
    EXPECT_NE(choose_conv_impl(grouped, pass, training).name, "reference");
}

}  // namespace
}  // namespace cpudl::conv
