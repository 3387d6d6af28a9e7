// A convolution's weight gradient as one implicit GEMM over channels-last activations: dW (OHWI
// order) = dY^T x im2col(X), the im2col matrix never built -- each KC x NR sliver of it is packed
// straight from X, the contiguous NR channels of one input pixel per output pixel. Written for
// the strided layers of ResNet, where oneDNN 2.6's weight gradient runs at 50-60% of the fp32
// roof here (docs/BENCHMARKS.md): the reduction over output pixels is long (784-12544), and the
// GEMM's microkernel (the kernel table's f32_gemm_tile) keeps its C tile in registers across it.
#pragma once

#include <cstdint>

#include "dense/shapes.h"

namespace cpudl::conv {

// Whether the implicit GEMM takes this convolution's weight gradient: channels-last, groups 1,
// no dilation, and input channels a multiple of the active tile's NR (each packed sliver is NR
// channels of one pixel). CPUDL_IMPLICIT_GEMM=0 turns the path off (to compare with oneDNN).
bool implicit_gemm_weight_grad_applies(const dense::ConvShape& s);

// The implementation list's preference (conv_list.h's prefers()): where the implicit GEMM beats oneDNN's
// weight gradient on this machine -- strided layers with a kernel wider than 1x1 and at least 256 output
// channels (ResNet-18 at batch 16, 1 thread: layer3.0 1.02-1.09x, layer4.0 1.21-1.27x oneDNN's speed; at 128
// output channels, layer2.0, a fifth of the 14-row tiles is padding and the two run even on one thread and
// 0.85x on two; 1x1/2 layers, whose packing is not amortised over taps, 0.6-0.95x). conv2d asks the tap-major
// path first (dense/conv/tap_gemm_weight_grad.h), which takes those with up to 128 input channels (layer3.0
// too).
bool implicit_gemm_weight_grad_preferred(const dense::ConvShape& s);

// dw ([out_channels][in_channels][kernel_h][kernel_w], PyTorch's OIHW) and, when db is not null,
// db ([out_channels], the sum of dy over its pixels), from the layer's input x and output
// gradient dy, both channels-last ([N][H][W][C] in memory).
void implicit_gemm_weight_grad(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                               float* db = nullptr);

}  // namespace cpudl::conv
