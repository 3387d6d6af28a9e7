// What Conv-like nodes read from their attributes, defined once in dense.cpp for the float
// convolutions there and the int8 one of quantization.cpp: the 2-D window (kernel, strides,
// dilations, symmetric pads, auto_pad resolved), the whole convolution shape, and the activation
// the optimiser fused.
#pragma once

#include <cstdint>

#include <string>

#include "dense/onednn/dense.h"
#include "infer/op_registry.h"

namespace cpudl::infer {

struct Window2d {
  std::int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  std::int64_t out_h(std::int64_t h) const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  std::int64_t out_w(std::int64_t w) const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

// Throws naming the node on bad attributes or asymmetric padding (which cpudl does not support).
Window2d window_2d(const OpSetup& s, std::int64_t h, std::int64_t w, std::int64_t kh, std::int64_t kw);

// Input X (N x C x H x W) and weights W (O x C/group x kh x kw) with the node's window, group and
// the layouts assign_layouts chose (cpudl.src_layout, cpudl.dst_layout); checks a bias B of O at
// `bias_input`. Throws naming the node.
onednn::ConvShape conv_shape(const OpSetup& s, std::size_t bias_input = 2);

// The activation the optimiser fused into this node (attributes cpudl.activation, cpudl.clip_*).
struct FusedActivation {
  onednn::Activation kind = onednn::Activation::none;
  float lo = 0.0f, hi = 0.0f;
};
// `prefix` "cpudl.dw_" reads a cpudl.ConvDepthwise node's second activation.
FusedActivation fused_activation(const OpSetup& s, const std::string& prefix = "cpudl.");

}  // namespace cpudl::infer
