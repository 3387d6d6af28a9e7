// Stride-1 3x3 convolutions by Winograd F(4x4, 3x3) or F(2x2, 3x3) (kernels/winograd/winograd.h
// says how and why): the weights are transformed once, when the convolution is prepared, and
// each run walks the batch's output tiles in blocks sized for the caches. Inference only (no backward);
// activations in the blocked layout the inference runtime keeps between convolutions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/kernel_types.h"
#include "onednn/dense.h"

namespace cpudl::conv {

struct WinogradConvShape {
  std::int64_t batch = 0, in_channels = 0, height = 0, width = 0, out_channels = 0, pad = 0;
  std::int64_t block = 8;  // channels per block of the layout (8 or 16)
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
// check for the inference runtime and `cpudl bench conv`. Activations in the blocked layout.
std::optional<WinogradConvShape> winograd_shape(const onednn::ConvShape& s);

class WinogradConv {
 public:
  // weights: OIHW [out_channels][in_channels][3][3], read once here.
  WinogradConv(const WinogradConvShape& shape, const float* weights);
  // y = min(max(conv(x) + bias + residual, lo), hi); bias [K] and residual (y's shape) may be null.
  // threads: 0 = the runtime's count.
  void forward(const float* x, const float* bias, const float* residual, float lo, float hi, float* y,
               int threads = 0) const;
  const WinogradConvShape& shape() const { return shape_; }

 private:
  WinogradConvShape shape_;
  kernels::WinogradShape tiles_{};
  std::vector<float> weights_storage_;  // U [36][K / 16][C][16], 64-byte aligned inside
  const float* weights_ = nullptr;
};

}  // namespace cpudl::conv
