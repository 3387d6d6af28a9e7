// The dense descriptors' own rules (shapes.h): FLOP counts, validation and their text.
#include "dense/shapes.h"

#include <algorithm>
#include <cmath>

#include "cpudl/error.h"

namespace cpudl::dense {

std::string_view layout_name(ActivationLayout layout) {
  switch (layout) {
    case ActivationLayout::nhwc:
      return "nhwc";
    case ActivationLayout::blocked:
      return "blocked";
    case ActivationLayout::nchw:
      break;
  }
  return "nchw";
}

std::string describe(const ConvShape& s) {
  std::string text = "[";
  return text + std::to_string(s.batch) + "x" + std::to_string(s.in_channels) + "x" +
         std::to_string(s.height) + "x" + std::to_string(s.width) + "] * [" + std::to_string(s.out_channels) +
         "x" + std::to_string(s.in_channels / std::max<std::int64_t>(1, s.groups)) + "x" +
         std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) + "] stride " +
         std::to_string(s.stride_h) + " pad " + std::to_string(s.pad_h) + " groups " +
         std::to_string(s.groups);
}

double ConvShape::flops() const {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(out_channels) *
         static_cast<double>(out_height()) * static_cast<double>(out_width()) *
         static_cast<double>(in_channels / std::max<std::int64_t>(1, groups)) *
         static_cast<double>(kernel_h * kernel_w);
}

void ConvShape::validate() const {
  auto fail = [&](const std::string& why) { throw Error("conv2d " + describe(*this) + ": " + why); };
  if (batch < 1 || in_channels < 1 || height < 1 || width < 1 || out_channels < 1 || kernel_h < 1 ||
      kernel_w < 1)
    fail("every size must be at least 1");
  if (stride_h < 1 || stride_w < 1 || dilation_h < 1 || dilation_w < 1)
    fail("stride and dilation must be at least 1");
  if (pad_h < 0 || pad_w < 0) fail("padding must not be negative");
  if (groups < 1 || in_channels % groups != 0 || out_channels % groups != 0)
    fail("groups must divide both in_channels and out_channels");
  if (out_height() < 1 || out_width() < 1) fail("the kernel does not fit the padded input");
}

std::string describe(const PoolShape& s) {
  static const char* kinds[] = {"max", "avg (padding counted)", "avg (padding excluded)"};
  return std::string(kinds[static_cast<int>(s.kind)]) + " pool2d [" + std::to_string(s.batch) + "x" +
         std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width) +
         "] kernel " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) + " stride " +
         std::to_string(s.stride_h) + " pad " + std::to_string(s.pad_h);
}

void PoolShape::validate() const {
  auto fail = [&](const std::string& why) { throw Error(describe(*this) + ": " + why); };
  if (batch < 1 || channels < 1 || height < 1 || width < 1 || kernel_h < 1 || kernel_w < 1)
    fail("every size must be at least 1");
  if (stride_h < 1 || stride_w < 1) fail("stride must be at least 1");
  if (pad_h < 0 || pad_w < 0 || pad_h * 2 > kernel_h || pad_w * 2 > kernel_w)
    fail("padding must be between 0 and half the kernel");
  if (out_height() < 1 || out_width() < 1) fail("the kernel does not fit the padded input");
}

void apply_epilogue(const MatmulEpilogue& e, float* row, std::int64_t j0, std::int64_t j1) {
  if (!e.bias && e.activation == Activation::none) return;
  for (std::int64_t j = j0; j < j1; ++j) {
    float& v = row[j];
    if (e.bias) v += e.bias[j];
    if (e.activation == Activation::relu) v = std::max(0.0f, v);
    if (e.activation == Activation::clip) v = std::min(std::max(v, e.clip_min), e.clip_max);
    if (e.activation == Activation::swish) v = v / (1.0f + std::exp(-v));
  }
}

}  // namespace cpudl::dense
