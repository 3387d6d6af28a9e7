// The 2-D window of a Conv, ConvTranspose or pool node: kernel, strides, dilations and symmetric
// pads, with auto_pad resolved for an input of h x w (defined in dense.cpp; the int8 convolution
// of quantization.cpp reads the same attributes the same way).
#pragma once

#include <cstdint>

#include "infer/op_registry.h"

namespace cpudl::infer {

struct Window2d {
  std::int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  std::int64_t out_h(std::int64_t h) const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  std::int64_t out_w(std::int64_t w) const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

// Throws naming the node on bad attributes or asymmetric padding (which cpudl does not support).
Window2d window_2d(const OpSetup& s, std::int64_t h, std::int64_t w, std::int64_t kh, std::int64_t kw);

}  // namespace cpudl::infer
