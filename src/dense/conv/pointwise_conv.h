// 1x1 convolutions, channels-last, as GEMMs over pixels with the pixels read and written where
// they lie (kernels/pointwise/pointwise.h): forward y[pixel] = W x[pixel at stride s], and the
// data gradient dx[pixel at stride s] = W^T dy[pixel], with the pixels a stride skips zeroed in
// the same write stream. The weights are packed into 64-column panels once per call (k x 64
// floats, in L1 while a block of pixels passes under them). Outputs past the streaming-store
// threshold are written with non-temporal stores.
//
// Written for ResNet's 1x1/2 shortcuts, where oneDNN 2.6 ran at 42-83% of the fp32 roof here
// (batch 16, 1 thread: layer2's backward-data pass 42%, its forward 62%; docs/BENCHMARKS.md):
// its strided 1x1 kernels gather the input first, and its backward-data pass writes the skipped
// pixels' zeros in a separate pass.
#pragma once

#include "dense/shapes.h"

namespace cpudl::conv {

// Channels-last, 1x1, unpadded, undilated, groups 1, and 64-column panels of the output side
// (output channels forward, input channels backward-data). CPUDL_POINTWISE=0 turns the path off.
bool pointwise_conv_forward_applies(const dense::ConvShape& s);
bool pointwise_conv_backward_data_applies(const dense::ConvShape& s);
// The implementation list's preference (conv_list.h's prefers()), where it measured faster than oneDNN on
// AVX-512 (see the .cpp): strided layers, forward with weights up to 128 KB, backward-data at any size.
bool pointwise_conv_forward_preferred(const dense::ConvShape& s);
bool pointwise_conv_backward_data_preferred(const dense::ConvShape& s);

// y = conv(x, w) + bias (bias may be null); w in OIHW ([out][in][1][1]).
void pointwise_conv_forward(const dense::ConvShape& s, const float* x, const float* w, const float* bias,
                            float* y);
// dx (every element written) from dy and w.
void pointwise_conv_backward_data(const dense::ConvShape& s, const float* dy, const float* w, float* dx);

}  // namespace cpudl::conv
