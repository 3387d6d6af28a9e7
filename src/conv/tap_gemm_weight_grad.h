// A strided convolution's weight gradient, one kernel tap at a time: for each tap, dW^T[tap] =
// (the input pixels the tap reads)^T x dY, a GEMM over the output pixels that reads x in place --
// 6 channels at a time, broadcast from where the channels-last activation holds them, against
// vectors of 64 output channels of dY -- so no im2col sliver is ever packed. Written for
// ResNet-18's layer2.0 and layer3.0 (3x3/2, 64 -> 128 and 128 -> 256), where oneDNN 2.6's weight
// gradient ran at 52-64% of the fp32 roof and the implicit GEMM (implicit_gemm_weight_grad.h) lost
// a fifth of its 14-row tiles to padding at 128 output channels.
//
// Threads take groups of images, each reading its share of x and dY from memory once into its own
// dW^T (taps x C x K, in L2; the groups are summed by the final reorder into OIHW). Each image is
// cut into blocks of whole output rows, about 56 pixels. Per block, dY's rows are first copied
// into a contiguous panel, 14 KB per 64 output channels: read in place, rows 512 bytes and more
// apart fell into a fraction of L1's sets and were evicted before the taps reused them (layer2.0,
// 1 thread: 19.9 -> 12.3 ms).
#pragma once

#include "onednn/dense.h"

namespace cpudl::conv {

// Whether this path can take the convolution: channels-last, groups 1, no dilation, output
// channels a multiple of 64. CPUDL_TAP_GEMM=0 turns the path off (to compare with the others).
bool tap_gemm_weight_grad_applies(const onednn::ConvShape& s);

// Training's choice: where it measured faster than oneDNN and the implicit GEMM -- strided layers
// with a kernel wider than 1x1, at most 128 input channels and output rows of 4 pixels or more,
// on AVX-512. With 256 input channels
// (layer4.0) x's pixels are 2 KB apart, two L1 sets per line, and the implicit GEMM's packed
// slivers run faster; 1x1/2 layers reuse the dY panel for one tap only and stay on oneDNN.
bool tap_gemm_weight_grad_preferred(const onednn::ConvShape& s);

// dw ([out_channels][in_channels][kernel_h][kernel_w], OIHW) and, when db is not null, db (the
// sum of dy over its pixels), from x and dy, both channels-last. threads: 0 = the runtime's count.
void tap_gemm_weight_grad(const onednn::ConvShape& s, const float* x, const float* dy, float* dw,
                          float* db = nullptr, int threads = 0);

}  // namespace cpudl::conv
