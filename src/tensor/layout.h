// Dense layouts other than row-major: a tensor is "dense" when its elements fill one block of
// storage in some order of its dimensions. The channels-last order (NHWC memory behind an NCHW
// shape, PyTorch's torch.channels_last) is the one that matters: oneDNN's fast convolutions,
// pooling and batch normalisation read and write it directly, so the training engine keeps
// activations in it from one layer to the next, and element-wise ops preserve whatever dense
// layout they are given instead of copying back to row-major.
#pragma once

#include "cpudl/tensor.h"

namespace cpudl {

// Elements fill exactly numel() consecutive slots from data() (strides a permutation of some
// row-major order; size-1 dimensions ignored).
bool is_dense(const Tensor& t);
// Both dense with the same strides on every dimension of size > 1: one flat loop over both
// spans visits matching elements.
bool same_dense_layout(const Tensor& a, const Tensor& b);
// 4-D [N, C, H, W] stored as N, H, W, C (size-1 dimensions ignored, so a one-channel NCHW
// image is channels-last too).
bool is_channels_last(const Tensor& t);

// Uninitialised tensors: channels-last for a 4-D shape; and one with `like`'s shape and, when
// `like` is dense, its layout (row-major otherwise).
Tensor empty_channels_last(const Shape& shape);
Tensor empty_like(const Tensor& like);

// `t`'s values in channels-last / in `like`'s dense layout: `t` itself when it already is, else a
// copy. Not recorded by autograd (layouts are invisible to gradients).
Tensor channels_last_values(const Tensor& t);
Tensor values_in_layout_of(const Tensor& t, const Tensor& like);

// Copies between row-major and channels-last 4-D tensors of one shape as per-image tiled
// transposes; false (nothing copied) for any other pair of layouts.
bool copy_between_channel_layouts(const Tensor& src, const Tensor& dst);

}  // namespace cpudl
