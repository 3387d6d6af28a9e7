// Convolutions whose every output window spans the whole input map run as one dense matrix
// product per batch: channels-last, an image is the row x[H*W*IC] and its output the row
// y[OH*OW*OC], and the convolution is y = x E^T with E[(oh,ow,oc)][(ih,iw,ic)] =
// W[oc][ic][ih - oh*stride + pad][iw - ow*stride + pad], a matrix with no zero blocks when every
// window covers the map. That is the deep end of a network on small images: ResNet-18 at 32x32
// runs 3x3 kernels on 2x2 and 1x1 maps, where oneDNN's direct kernels took 30-40% of a training
// step at 13-31% of the fp32 peak (their blocking assumes rows of pixels), and a GEMM of the same
// useful FLOPs runs at oneDNN's matmul speed.
#pragma once

#include "cpudl/tensor.h"
#include "dense/onednn/dense.h"

namespace cpudl::ops_detail {

// Every output window covers every input position (groups 1, dilation 1); the matrix E is then
// dense, and at most as many multiply-adds as the direct convolution (H*W <= KH*KW).
bool conv_covers_whole_map(const onednn::ConvShape& s);

// Where the kernel `s` runs sits in the stored weights [OC][IC][full_h][full_w]: the window
// [kh_begin, +s.kernel_h) x [kw_begin, +s.kernel_w), the rest being taps that only ever read
// padding (crop_dead_taps in layers.cpp). E is built from, and its gradient folded into, the
// stored kernel directly: no copy of the window either way.
struct KernelWindow {
  std::int64_t full_h = 0, full_w = 0, kh_begin = 0, kw_begin = 0;
};
KernelWindow whole_kernel(const onednn::ConvShape& s);

// E [OH*OW*OC][H*W*IC] from the window of weights [OC][IC][full_h][full_w].
Tensor conv_expanded_weights(const onednn::ConvShape& s, const float* w, const KernelWindow& window);

// y (channels-last) = x (channels-last) E^T + bias, ReLU fused when asked. With bf16 the products
// run on onednn::matmul_bf16 (Bf16Autocast), the bias gradient and the fold staying f32.
void conv_as_linear_forward(const onednn::ConvShape& s, const float* x, const Tensor& expanded,
                            const float* bias, bool relu, float* y, bool bf16);
void conv_as_linear_backward_data(const onednn::ConvShape& s, const float* dy, const Tensor& expanded,
                                  float* dx, bool bf16);
// Writes dw [OC][IC][full_h][full_w] (zero outside the window) and, when non-null, db [OC].
void conv_as_linear_backward_weights(const onednn::ConvShape& s, const KernelWindow& window, const float* x,
                                     const float* dy, float* dw, float* db, bool bf16);

}  // namespace cpudl::ops_detail
