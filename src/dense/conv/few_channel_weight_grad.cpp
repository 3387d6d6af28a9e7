// A first layer's weight gradient on the native channels-last kernel (few_channel_weight_grad.h).
#include "dense/conv/few_channel_weight_grad.h"

#include <vector>

#include "dense/conv/planar_conv.h"
#include "kernels/conv/conv.h"
#include "kernels/dispatch.h"
#include "runtime/parallel.h"

namespace cpudl::conv {

bool few_channel_weight_grad_runs(const dense::ConvShape& s) {
  // The kernel reads each pixel's gradient in whole vectors of 8 output channels.
  return s.layout == dense::ActivationLayout::nhwc && s.groups == 1 && s.in_channels <= kFewInputChannels &&
         s.out_channels % 8 == 0;
}

void few_channel_weight_grad(const dense::ConvShape& s, const float* x, const float* dy, float* dw,
                             float* db) {
  const kernels::ConvWindow w{
      static_cast<std::size_t>(s.in_channels),  static_cast<std::size_t>(s.height),
      static_cast<std::size_t>(s.width),        static_cast<std::size_t>(s.out_channels),
      static_cast<std::size_t>(s.out_height()), static_cast<std::size_t>(s.out_width()),
      static_cast<std::size_t>(s.kernel_h),     static_cast<std::size_t>(s.kernel_w),
      static_cast<std::size_t>(s.stride_h),     static_cast<std::size_t>(s.stride_w),
      static_cast<std::size_t>(s.pad_h),        static_cast<std::size_t>(s.pad_w),
      static_cast<std::size_t>(s.dilation_h),   static_cast<std::size_t>(s.dilation_w)};
  const std::size_t oc_pad = kernels::conv_padded_channels(w.out_channels);
  const std::size_t taps = w.kernel_h * w.kernel_w * w.in_channels, per_thread = (taps + 1) * oc_pad;
  const std::size_t in_image = w.height * w.width * w.in_channels,
                    out_image = w.out_h * w.out_w * w.out_channels;
  const auto kernel = kernels::kernel_table().f32_conv_backward_weights_nhwc.fn;
  const std::vector<float> sums =
      sum_over_images(static_cast<std::size_t>(s.batch), per_thread, [&](std::size_t n, float* mine) {
        kernel(w, x + n * in_image, dy + n * out_image, mine, db ? mine + taps * oc_pad : nullptr);
      });
  for (std::size_t oc = 0; oc < w.out_channels; ++oc) {
    for (std::size_t ic = 0; ic < w.in_channels; ++ic)
      for (std::size_t kh = 0; kh < w.kernel_h; ++kh)
        for (std::size_t kw = 0; kw < w.kernel_w; ++kw)
          dw[((oc * w.in_channels + ic) * w.kernel_h + kh) * w.kernel_w + kw] =
              sums[((kh * w.kernel_w + kw) * w.in_channels + ic) * oc_pad + oc];
    if (db) db[oc] = sums[taps * oc_pad + oc];
  }
}

}  // namespace cpudl::conv
