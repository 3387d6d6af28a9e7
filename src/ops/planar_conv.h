// First layers on the planar kernels (kernels/conv/conv.h): a convolution with few input channels
// (1 for MNIST, 3 for RGB), stride 1, whose input images need no gradient, computed in NCHW with
// the ReLU fused into the store and its mask into the weight gradient.
#pragma once

#include <cstdint>

#include "cpudl/ops.h"
#include "cpudl/tensor.h"
#include "onednn/dense.h"

namespace cpudl::ops_detail {

// First layers: at most this many input channels. From kFewInputChannelsMinOutputs outputs on
// the native first-layer kernels beat oneDNN; below (LeNet-5's 6) each tap is one FMA per pixel
// and oneDNN is faster (3.9 vs 7 ms for LeNet-5's first layer at batch 256), and LeNet-5's
// 6-channel output feeds a max pool that is 6x faster channels-last than on NCHW.
inline constexpr std::int64_t kFewInputChannels = 4, kFewInputChannelsMinOutputs = 16;

// conv2d's shape checks (an Error naming the mismatch) and its oneDNN shape.
onednn::ConvShape conv2d_shape(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Conv2dOptions& o);

bool planar_first_layer(const onednn::ConvShape& s, const Tensor& x);
Tensor planar_conv2d(const onednn::ConvShape& s, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     bool relu);

}  // namespace cpudl::ops_detail
