// Convolutions whose every output window spans the whole input map run as one dense matrix
// product per batch: channels-last, an image is the row x[H*W*IC] and its output the row
// y[OH*OW*OC], and the convolution is y = x E^T with E[(oh,ow,oc)][(ih,iw,ic)] =
// W[oc][ic][ih - oh*stride + pad][iw - ow*stride + pad], a matrix with no zero blocks when every
// window covers the map. That is the deep end of a network on small images: ResNet-18 at 32x32
// runs 3x3 kernels on 2x2 and 1x1 maps, where oneDNN's direct kernels took 30-40% of a training
// step at 13-31% of the fp32 peak (their blocking assumes rows of pixels), and a GEMM of the same
// useful FLOPs runs at oneDNN's matmul speed.
#pragma once

#include "dense/shapes.h"
#include "runtime/aligned_buffer.h"

namespace cpudl::conv {

// Every output window covers every input position (groups 1, dilation 1); the matrix E is then
// dense, and at most as many multiply-adds as the direct convolution (H*W <= KH*KW).
bool conv_covers_whole_map(const dense::ConvShape& s);

// E [OH*OW*OC][H*W*IC] from the weights [OC][IC][KH][KW]: built once per weights and used by the
// forward and backward-data passes (a training step builds it in the forward pass).
struct ExpandedWeights {
  AlignedArray storage;
  const float* data = nullptr;
};
void expand_weights(const dense::ConvShape& s, const float* w, ExpandedWeights& e);

// y (channels-last) = x (channels-last) E^T + bias, ReLU fused when asked. With bf16 the products
// run on onednn::matmul_bf16 (Bf16Autocast), the bias gradient and the fold staying f32.
void conv_as_linear_forward(const dense::ConvShape& s, const float* x, const float* expanded,
                            const float* bias, bool relu, float* y, bool bf16);
void conv_as_linear_backward_data(const dense::ConvShape& s, const float* dy, const float* expanded,
                                  float* dx, bool bf16);
// Writes dw [OC][IC][KH][KW] and, when non-null, db [OC].
void conv_as_linear_backward_weights(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                                     float* db, bool bf16);

}  // namespace cpudl::conv
