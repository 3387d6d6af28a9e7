// A first layer's weight gradient (1-4 input channels, planar_conv.h's kFewInputChannels) on the
// native channels-last kernel (kernels/conv/conv.h): oneDNN's NHWC backward-weights pass runs it
// at 7-8% of peak, blocking over input channels that are not there. Images are split over the
// threads, each summing into its own [KH][KW][IC][OC] buffer; the sums are then added and
// transposed to PyTorch's OIHW.
#pragma once

#include "dense/shapes.h"

namespace cpudl::conv {

// Channels-last, groups 1, at most kFewInputChannels inputs, output channels in 8s (the kernel
// reads each pixel's gradient in whole vectors).
bool few_channel_weight_grad_runs(const dense::ConvShape& s);
// dw (OIHW) and, when db is not null, db from x and dy, both channels-last.
void few_channel_weight_grad(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                             float* db = nullptr);

}  // namespace cpudl::conv
