// Stride-1 3x3 convolutions by Winograd F(4x4, 3x3) or F(2x2, 3x3) (kernels/winograd/winograd.h
// says how and why): the weights are transformed once, when the convolution is prepared, and
// each run walks the batch's output tiles in blocks sized for the caches. Activations in the
// blocked layout the inference runtime keeps between convolutions, or channels-last (NHWC), as
// training keeps them; there the weights are transformed on every call (they change each step),
// and a layer's backward-data pass is the same kind of convolution, over dy with the rotated,
// transposed kernel.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dense/shapes.h"
#include "kernels/kernel_types.h"

namespace cpudl::conv {

struct WinogradConvShape {
  std::int64_t batch = 0, in_channels = 0, height = 0, width = 0, out_channels = 0, pad = 0;
  std::int64_t block = 8;  // channels per block of the layout (8 or 16); 0 = channels-last (NHWC)
  std::int64_t tile = 4;   // output tile: 4 = F(4x4, 3x3), 2 = F(2x2, 3x3)
};

// The tile the Winograd path uses for this convolution, or 0 when it does not take it (channel
// counts it cannot tile: C a multiple of 8 and at least 16, K of 16). F(4x4) needs enough output
// tiles that its 4x larger transformed weights are read less often than its arithmetic saves;
// below 8 tiles (batch 1 at 7x7 pixels) F(2x2), whose weights are 1.8x the direct ones, takes
// the layer. CPUDL_WINOGRAD=0 turns the path off (to compare with oneDNN's direct convolutions).
int winograd_tile(const WinogradConvShape& s);

// The Winograd shape of a convolution, tile chosen, when it is one the path takes (groups 1, 3x3,
// stride 1, no dilation, symmetric padding, and winograd_tile() not 0); the one eligibility
// check for the inference runtime, training and `cpudl bench conv`. Activations in s.layout:
// blocked or channels-last (NCHW is not taken).
std::optional<WinogradConvShape> winograd_shape(const dense::ConvShape& s);

// Which pass of a layer the convolution runs, so which filters the weights hold: forward, OIHW
// [out_channels][in_channels][3][3]; backward_data, the layer's OIHW weights, whose outputs are
// this convolution's inputs ([in_channels][out_channels][3][3], each filter rotated 180 degrees).
enum class WinogradPass { forward, backward_data };

// The Winograd shape of a layer's backward-data pass (dx = dy convolved with the rotated,
// transposed kernel at padding 2 - pad, out_channels inputs and in_channels outputs), when the
// path takes it; s channels-last or blocked as for winograd_shape().
std::optional<WinogradConvShape> winograd_backward_data_shape(const dense::ConvShape& s);

class WinogradConv {
 public:
  // The weights are read (transformed) here, once. storage: null to own the transformed weights,
  // or transformed_floats() floats, 64-byte aligned, the caller keeps alive (training reuses one
  // buffer each step: tens of megabytes freshly allocated would page-fault on every call).
  //
  WinogradConv(const WinogradConvShape& shape, const float* weights,
               WinogradPass pass = WinogradPass::forward, float* storage = nullptr);
  static std::size_t transformed_floats(const WinogradConvShape& shape);
  // y = min(max(conv(x) + bias + residual, lo), hi); bias [K] and residual (y's shape) may be null.
  //
  void forward(const float* x, const float* bias, const float* residual, float lo, float hi, float* y) const;
  const WinogradConvShape& shape() const { return shape_; }

 private:
  WinogradConvShape shape_;
  kernels::WinogradShape tiles_{};
  std::vector<float> weights_storage_;  // U [36][K / 16][C][16], 64-byte aligned inside
  const float* weights_ = nullptr;
};

// The implementation list's preference (conv_list.h's prefers()): the Winograd shape of a channels-last
// layer's forward or backward-data pass when training should take it -- where winograd_shape() does, and with
// enough output tiles to repay transforming the weights on every call (they write positions x C x K floats:
// at batch 16, ResNet-18's 512-channel 7x7 layer has 64 tiles and gains ~10%, its 64-channel 56x56 layer 3136
// tiles and gains 40-45%).
std::optional<WinogradConvShape> winograd_training_shape(const dense::ConvShape& s, WinogradPass pass);

// Training's call: the weights are new on every step, so they are transformed on each call (into
// a per-thread buffer kept between calls), then y = min(max(conv(x) + bias, lo), hi).
void winograd_convolve(const WinogradConvShape& shape, const float* weights, WinogradPass pass,
                       const float* x, const float* bias, float lo, float hi, float* y);

// Training's weight gradient of a stride-1 3x3 layer by F(4x4, 3x3) (kernels/winograd/winograd.h):
// dw (OIHW) and, when db is not null, the bias gradient db ([out_channels]) from the layer's
// input x and output gradient dy, both in `shape`'s layout (its forward shape: in_channels
// inputs, out_channels outputs; tile 4).
void winograd_backward_weights(const WinogradConvShape& shape, const float* x, const float* dy, float* dw,
                               float* db = nullptr);

}  // namespace cpudl::conv
