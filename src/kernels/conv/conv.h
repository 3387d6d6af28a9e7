// The weight gradient of convolutions with few input channels (a network's first layer: 1 for
// MNIST, 3 for RGB), channels-last. oneDNN's NHWC backward-weights pass runs these at 7-8% of
// the fp32 peak here (SimpleCNN's 1 -> 32 3x3 layer: 13.9 ms per batch of 256), because its
// kernels block over input channels that are not there. Here each output pixel's OC gradients
// (whole vectors) are multiplied by one input value per tap: per pixel one broadcast and OC/8
// FMAs per tap, accumulated in registers along an output row, with blocks of taps sharing each
// pixel's gradient vectors. SimpleCNN's backward conv2d went from 13.9 to 5.8-7.0 ms per step
// (CPUDL_PROFILE=1 cpudl bench model --train, 1 thread). With fewer than 16 output channels
// oneDNN stays faster (the op picks). ~15% of the fp32 roof (BM_conv_backward_weights_nhwc): the
// first pass over each image's gradient (the bias sum) waits on memory, about 40% of the time;
// prefetching the next image during this one's taps is the next step.
//
// The planar (NCHW) pair, forward and weight gradient, serves first layers whose output feeds a
// classifier through flatten (SimpleCNN): a channels-last output would be transposed back to
// NCHW order in each direction (22 MB per batch of 256 there), and planar output lets the ReLU
// be fused into the convolution's store and its mask into the weight gradient's first pass.
// Stride 1, no dilation; the op pads each image into a scratch buffer first. Forward: output
// column vectors x output channels in registers, x loads and broadcast weights per tap. Weight
// gradient: per output channel the (masked, zero-padded) gradient plane in L1, then blocks of
// taps that each gradient vector feeds (avx2.cpp: 8 columns, 12 taps; avx512.cpp: 16, 28).
#pragma once

#include <cstddef>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

// Limits of the planar kernels' vector paths (larger shapes run the reference loops).
inline constexpr std::size_t kConvPlanesMaxTaps = 4 * 11 * 11, kConvPlanesMaxPlane = 64 * 64;

inline constexpr std::size_t conv_padded_channels(std::size_t oc) { return (oc + 7) / 8 * 8; }
// The planar kernels' padded input row (ConvPlanes::x_ld): the weight gradient reads whole
// 16-lane vectors of each output row (zero-padded gradient columns) shifted by up to kernel_w - 1.
inline constexpr std::size_t conv_planes_row(std::size_t out_w, std::size_t kernel_w) {
  return (out_w + 15) / 16 * 16 + kernel_w - 1;
}

// Each tap's offset in the padded input from its output position, taps in OIHW order.
inline void conv_planes_tap_offsets(const ConvPlanes& p, std::size_t* offsets) {
  for (std::size_t ic = 0, t = 0; ic < p.in_channels; ++ic)
    for (std::size_t kh = 0; kh < p.kernel_h; ++kh)
      for (std::size_t kw = 0; kw < p.kernel_w; ++kw) offsets[t++] = ic * p.x_plane + kh * p.x_ld + kw;
}

// The planar forward kernels walk an output plane as a list of W-column vectors (p.out_w >= W):
// a row whose width is not a multiple of W ends with one overlapping the vector before it, whose
// shared columns are computed and stored twice, identically. Groups of G vectors are taken at a
// time; the last group repeats the plane's last vector when the count is not a multiple of G.
template <std::size_t W, std::size_t G>
class PlaneVectorGroups {
 public:
  explicit PlaneVectorGroups(const ConvPlanes& p) : p_(p), vectors_(p.out_h * ((p.out_w + W - 1) / W)) {}
  std::size_t groups() const { return (vectors_ + G - 1) / G; }
  // The next group's offsets in the padded input and in the output plane.
  void next(std::size_t* x_at, std::size_t* y_at) {
    for (std::size_t j = 0; j < G; ++j, ++v_) {
      if (v_ < vectors_) {
        const std::size_t col = c0_ + W <= p_.out_w ? c0_ : p_.out_w - W;
        last_x_ = row_ * p_.x_ld + col;
        last_y_ = row_ * p_.out_w + col;
        c0_ += W;
        if (c0_ >= p_.out_w) c0_ = 0, ++row_;
      }
      x_at[j] = last_x_, y_at[j] = last_y_;  // past the plane: the last vector again
    }
  }

 private:
  const ConvPlanes& p_;
  std::size_t vectors_, v_ = 0, row_ = 0, c0_ = 0;  // the next vector: its row and first column
  std::size_t last_x_ = 0, last_y_ = 0;
};

#define CPUDL_DECLARE_CONV(isa)                                                                      \
  void f32_conv_backward_weights_nhwc__##isa(const ConvWindow& w, const float* x, const float* dy,   \
                                             float* dw, float* db);                                  \
  void f32_conv_forward_planes__##isa(const ConvPlanes& p, const float* x, const float* w,           \
                                      const float* bias, bool relu, float* y);                       \
  void f32_conv_backward_weights_planes__##isa(const ConvPlanes& p, const float* x, const float* dy, \
                                               const float* y, float* dw, float* db);
CPUDL_DECLARE_CONV(ref)
CPUDL_DECLARE_CONV(avx2)
#undef CPUDL_DECLARE_CONV
void f32_conv_forward_planes__avx512(const ConvPlanes& p, const float* x, const float* w, const float* bias,
                                     bool relu, float* y);
void f32_conv_backward_weights_planes__avx512(const ConvPlanes& p, const float* x, const float* dy,
                                              const float* y, float* dw, float* db);

// The tap-major weight gradient's block (TapGemmArgs): AVX-512 only, 6 rows x 4 vectors in
// 24 accumulators (an AVX2 tile of this width would not fit its 16 registers; those machines keep
// oneDNN's weight gradient).
void f32_conv_weight_grad_taps__ref(const TapGemmArgs& args);
void f32_conv_weight_grad_taps__avx512(const TapGemmArgs& args);

}  // namespace cpudl::kernels
