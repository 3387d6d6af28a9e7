// First layers on the planar kernels (kernels/conv/conv.h): a convolution with few input channels
// (1 for MNIST, 3 for RGB) and stride 1, computed on NCHW planes -- each image zero-padded once
// into a scratch batch, the weights packed [OC/8][taps][8]. Training's conv2d runs it for layers
// whose input images need no gradient (ops/planar_conv.cpp fuses the ReLU into the store and its
// mask into the weight gradient, and the layer with a narrow classifier after it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dense/shapes.h"
#include "kernels/kernel_types.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::conv {

// First layers: at most this many input channels. From kFewInputChannelsMinOutputs outputs on
// the planar output stays NCHW and the channels-last weight-gradient kernel (for inputs that need
// a gradient) beats oneDNN; below (LeNet-5's 6) that kernel does one FMA per pixel and tap and
// oneDNN stays, and the planar output is transposed to channels-last for the pooling after it.
inline constexpr std::int64_t kFewInputChannels = 4, kFewInputChannelsMinOutputs = 16;

// Groups 1, at most kFewInputChannels inputs, stride 1, no dilation, and few enough taps for the
// planar kernels' vector paths.
bool planar_shape(const dense::ConvShape& s);

// A batch of first-layer inputs ready for the planar kernels.
class PlanarConv {
 public:
  // x: the batch in s.layout (NCHW or channels-last); w [OC][IC][KH][KW] (null when only the
  // weight gradient is wanted); bias [OC] or null.
  PlanarConv(const dense::ConvShape& s, const float* x, const float* w, const float* bias);

  // Image n's output planes y [OC][OH][OW] (relu: max(., 0) fused into the store).
  void forward(std::size_t n, bool relu, float* y) const;
  // Adds image n's weight gradient for its output gradient planes dy (masked where y <= 0 when y
  // is given) into dw [OC][taps] and, when not null, db [OC].
  void backward_weights(std::size_t n, const float* dy, const float* y, float* dw, float* db) const;
  // The same for the output channels [c0, c0 + count) only (c0 a multiple of the packed block of
  // 8): y, dy, dw and db are still the whole layer's, addressed at channel c0.
  void forward(std::size_t n, std::size_t c0, std::size_t count, bool relu, float* y) const;
  void backward_weights(std::size_t n, std::size_t c0, std::size_t count, const float* dy, const float* y,
                        float* dw, float* db) const;

  std::size_t batch() const { return batch_; }
  std::size_t taps() const { return taps_; }  // IC x KH x KW
  std::size_t channels() const { return p_.out_channels; }
  std::size_t plane() const { return p_.out_h * p_.out_w; }
  std::size_t out_image() const { return out_image_; }

 private:
  kernels::ConvPlanes with_channels(std::size_t count) const;
  kernels::ConvPlanes p_{};
  std::size_t batch_ = 0, taps_ = 0, in_image_ = 0, out_image_ = 0;
  AlignedArray padded_;
  const float* padded_data_ = nullptr;
  std::vector<float> packed_, bias_;
};

// The list's plain passes (conv_list.h): y in s.dst_layout (or s.layout) with the epilogue's ReLU;
// dw [OC][IC][KH][KW] and db (or null) from x in s.layout and dy in the output's layout.
void planar_forward(const dense::ConvShape& s, const float* x, const float* w, const float* bias, bool relu,
                    float* y);
void planar_backward_weights(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                             float* db);

}  // namespace cpudl::conv
