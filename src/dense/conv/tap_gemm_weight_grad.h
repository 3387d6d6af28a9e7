// A strided convolution's weight gradient as one GEMM per kernel row: for kernel row kh, dW^T[kh]
// ([kw][c] x 64 output channels at a time) = X_kh^T x dY over the output pixels, where X_kh's row
// for an output pixel is the KW taps' C channels it reads -- for one pixel those are KW * C
// consecutive floats of the (zero-padded) input row, so they are read where they lie, 6 at a
// time broadcast against vectors of 64 output channels of dY, and no im2col sliver is packed.
// Written for ResNet-18's layer2.0 and layer3.0 (3x3/2, 64 -> 128 and 128 -> 256), where oneDNN
// 2.6's weight gradient ran at 52-64% of the fp32 roof and the implicit GEMM
// (implicit_gemm_weight_grad.h) lost a fifth of its 14-row tiles to padding at 128 output
// channels; its 7x7/2 stem (3 input channels: rows of 21 floats) runs 1.15-1.2x oneDNN's speed.
//
// Threads take groups of images, each reading its share of x and dY from memory once into its own
// dW^T (taps x C x K, in L2; the groups are summed by the final reorder into OIHW). Each image is
// cut into blocks of whole output rows, about 56 pixels. Per block:
// - dY's rows are copied into a contiguous panel, 14 KB per 64 output channels: read in place,
//   rows 512 bytes and more apart fell into a fraction of L1's sets and were evicted before the
//   taps reused them (layer2.0, 1 thread: 19.9 -> 12.3 ms);
// - the input rows the block reads are copied with their zero padding, so that every pixel reads
//   all KW taps and no border pixel needs a call of its own (the stem, 1 thread: 38.5 -> 34.6 ms).
#pragma once

#include "dense/shapes.h"

namespace cpudl::conv {

// Whether this path can take the convolution: channels-last, groups 1, no dilation, output
// channels a multiple of 64. CPUDL_TAP_GEMM=0 turns the path off (to compare with the others).
bool tap_gemm_weight_grad_applies(const dense::ConvShape& s);

// The implementation list's preference (conv_list.h's prefers()): where it measured faster than oneDNN and
// the implicit GEMM -- strided layers with a kernel wider than 1x1, at most 128 input channels and output
// rows of 4 pixels or more, on AVX-512. With 256 input channels and 512 outputs (layer4.0) a group's dW^T
// is 4.7 MB, past L2, and each 49-pixel block streams it once: the implicit GEMM, which keeps its C tile in
// registers across the whole reduction, runs faster there. 1x1/2 layers, whose copied dY panel
// serves one tap only, stay on oneDNN, which they only match; copying their strided pixels densely
// or fetching the next block early did not change that (docs/ARCHITECTURE.md has the figures).
bool tap_gemm_weight_grad_preferred(const dense::ConvShape& s);

// dw ([out_channels][in_channels][kernel_h][kernel_w], OIHW) and, when db is not null, db (the
// sum of dy over its pixels), from x and dy, both channels-last.
void tap_gemm_weight_grad(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                          float* db = nullptr);

}  // namespace cpudl::conv
