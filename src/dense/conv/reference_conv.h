// The convolution's three passes as plain loops accumulating in double: the last entry of the
// implementation list (conv_list.h), never chosen by the walk but forced with
// CPUDL_CONV_IMPL=reference to tell a wrong answer from a fast one. Every layout (NCHW,
// channels-last, blocked), groups, strides, padding and dilation; the forward epilogue's
// activation and residual, not a fused depthwise stage.
#pragma once

#include "dense/shapes.h"

namespace cpudl::conv {

// y (in s.dst_layout, or s.layout) = act(conv(x) + bias + residual); bias and residual may be null.
void reference_forward(const dense::ConvShape& s, const float* x, const float* w, const float* bias,
                       const dense::ConvEpilogue& epilogue, float* y);
// dx (in s.layout) from dy (in the output's layout) and w.
void reference_backward_data(const dense::ConvShape& s, const float* dy, const float* w, float* dx);
// dw (OIHW) and, when db is not null, db from x and dy.
void reference_backward_weights(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                                float* db);

}  // namespace cpudl::conv
