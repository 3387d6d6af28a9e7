// First layers on the planar kernels (kernels/conv/conv.h): a convolution with few input channels
// (1 for MNIST, 3 for RGB), stride 1, whose input images need no gradient, computed in NCHW with
// the ReLU fused into the store and its mask into the weight gradient.
#pragma once

#include <cstdint>

#include "cpudl/ops.h"
#include "cpudl/tensor.h"
#include "dense/onednn/dense.h"

namespace cpudl::ops_detail {

// conv2d's shape checks (an Error naming the mismatch) and its oneDNN shape.
onednn::ConvShape conv2d_shape(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Conv2dOptions& o);

bool planar_first_layer(const onednn::ConvShape& s, const Tensor& x);
Tensor planar_conv2d(const onednn::ConvShape& s, const Tensor& x, const Tensor& weight, const Tensor& bias,
                     bool relu);

}  // namespace cpudl::ops_detail
