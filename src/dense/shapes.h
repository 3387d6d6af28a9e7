// The shapes of the dense primitives -- matrix products, 2-D convolutions, pooling -- as plain
// descriptors that every implementation reads: oneDNN's primitives (dense/onednn/), cpudl's own
// convolution algorithms (dense/conv/), and the ops and the inference runtime that call them.
// No engine's types appear here, so an algorithm's header names its shape without pulling in
// another engine's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cpudl::dense {

// clip: min(max(x, clip_min), clip_max), as ONNX Clip and ReLU6 (MobileNet) need.
// swish: x * sigmoid(x) (SiLU; YOLO's Conv-BN-SiLU), as oneDNN's eltwise_swish with alpha 1.
enum class Activation : int { none = 0, relu = 1, clip = 2, swish = 3 };
// blocked: oneDNN's nChw8c (AVX2) or nChw16c (AVX-512) -- channels in blocks of
// blocked_layout_channels(), each block's H x W plane stored with the block innermost. It is what
// oneDNN's direct convolutions compute in; it needs channels divisible by the block.
enum class ActivationLayout : int { nchw = 0, nhwc = 1, blocked = 2 };
// "nchw", "nhwc", "blocked".
std::string_view layout_name(ActivationLayout layout);
// NCHW or NHWC: one plane of values per image, not oneDNN's channel blocks.
inline bool plain_planes(ActivationLayout l) {
  return l == ActivationLayout::nchw || l == ActivationLayout::nhwc;
}

// C[b] = op(A[b]) * op(B[b]) (+ bias[n]) (+ C[b] when accumulate), then the activation.
// A is m x k (k x m when transpose_a), B is k x n (n x k when transpose_b); batch >= 1 with
// contiguous batches.
struct MatmulShape {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
};

struct MatmulEpilogue {
  const float* bias = nullptr;  // length n, or null
  Activation activation = Activation::none;
  bool accumulate = false;                 // C += result (oneDNN's sum post-op)
  float clip_min = 0.0f, clip_max = 6.0f;  // Activation::clip's bounds
};
// The epilogue for engines that have none (CBLAS, the weight-row kernels), on columns [j0, j1)
// of one row of C: bias, then the activation (accumulate is the engine's own).
void apply_epilogue(const MatmulEpilogue& e, float* row, std::int64_t j0, std::int64_t j1);

struct ConvShape {
  std::int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  std::int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  ActivationLayout layout = ActivationLayout::nchw;
  // The output's layout when it differs from the input's (forward only): a first layer with 3
  // input channels reads NCHW and writes blocked.
  std::optional<ActivationLayout> dst_layout;
  std::int64_t out_height() const {
    return (height + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) / stride_h + 1;
  }
  std::int64_t out_width() const {
    return (width + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) / stride_w + 1;
  }
  // Multiply-adds x 2 of the forward pass (padded taps included).
  double flops() const;
  void validate() const;  // throws Error naming the bad field
};
// "[NxCxHxW] * [OxIxKHxKW] stride S pad P groups G": error messages and CPUDL_VERBOSE lines.
std::string describe(const ConvShape& s);

// A depthwise 3x3 convolution (one group per channel, padding 1, stride 1 or 2) that oneDNN runs
// inside a 1x1 convolution's kernel: each tile of the pointwise output is consumed by the
// depthwise stage while it is in cache and never written to memory. MobileNet's inverted residual
// blocks (expand 1x1 -> depthwise 3x3) save their widest tensors' round trip this way: measured
// here at batch 16, 16->96 channels at 112x112 then stride 2 went from 16.6 to 7.3 ms.
struct DepthwiseStage {
  std::int64_t stride = 1;
  const float* weights = nullptr;  // channels x 1 x 3 x 3, as PyTorch stores them
  const float* bias = nullptr;     // channels, or null
  Activation activation = Activation::none;
  float clip_min = 0.0f, clip_max = 6.0f;
  // Output size of an input side of `size` pixels.
  std::int64_t out_size(std::int64_t size) const { return (size - 1) / stride + 1; }
};
struct ConvEpilogue {
  Activation activation = Activation::none;
  const float* residual = nullptr;         // dst = act(conv + bias + residual); residual has dst's shape
  float clip_min = 0.0f, clip_max = 6.0f;  // Activation::clip's bounds
  // Applied after the activation; dst is then the depthwise stage's output. Needs a 1x1, stride-1,
  // unpadded, ungrouped convolution in the blocked layout and no residual; the depthwise weights
  // are cached under the same `weights_version` as the convolution's.
  const DepthwiseStage* depthwise = nullptr;
};

enum class PoolKind : int { max = 0, avg_include_padding = 1, avg_exclude_padding = 2 };
struct PoolShape {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;
  std::int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  PoolKind kind = PoolKind::max;
  ActivationLayout layout = ActivationLayout::nchw;
  // No backward pass will follow (the inference runtime): no argmax workspace is kept, and the
  // implementation list may choose differently (pool_list.cpp).
  bool forward_only = false;
  std::int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  void validate() const;
};
std::string describe(const PoolShape& s);

}  // namespace cpudl::dense
