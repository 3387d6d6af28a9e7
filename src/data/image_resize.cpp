// Image resizing for the models' input size (cpudl/data.h: resize_image). The filter is PIL's
// and torchvision's antialiased bilinear (interpolate(..., antialias=True)): a triangle whose
// support widens with the shrink factor, so every source pixel counts when an image shrinks
// (plain bilinear would sample 4 of them per output and alias a 4x-smaller digit into noise).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpudl/data.h"
#include "cpudl/error.h"

namespace cpudl::data {
namespace {

// Each output position's first source index and its normalised weights along one axis.
struct AxisWeights {
  std::vector<std::int64_t> first;
  std::vector<std::vector<float>> weights;
};

AxisWeights axis_weights(std::int64_t in, std::int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? scale : 1.0, invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  AxisWeights a;
  for (std::int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const std::int64_t lo = std::max<std::int64_t>(static_cast<std::int64_t>(center - support + 0.5), 0);
    const std::int64_t hi = std::min<std::int64_t>(static_cast<std::int64_t>(center + support + 0.5), in);
    std::vector<float> w;
    double total = 0;
    for (std::int64_t j = lo; j < hi; ++j) {
      const double x = std::fabs((static_cast<double>(j) - center + 0.5) * invscale);
      w.push_back(static_cast<float>(x < 1.0 ? 1.0 - x : 0.0));
      total += w.back();
    }
    for (float& v : w) v = total > 0 ? static_cast<float>(v / total) : 0.0f;
    a.first.push_back(lo);
    a.weights.push_back(std::move(w));
  }
  return a;
}

}  // namespace

Tensor convert_channels(const Tensor& image, std::int64_t channels) {
  if (image.dim() != 3 || image.size(0) == channels) return image;
  const Tensor src = image.contiguous();
  const std::int64_t n = src.size(1) * src.size(2);
  Tensor out = Tensor::empty({channels, src.size(1), src.size(2)});
  if (src.size(0) == 3 && channels == 1) {  // ITU-R 601 luminance, as PIL's convert("L")
    for (std::int64_t k = 0; k < n; ++k)
      out.data()[k] = 0.299f * src.data()[k] + 0.587f * src.data()[n + k] + 0.114f * src.data()[2 * n + k];
  } else if (src.size(0) == 1 && channels == 3) {
    for (std::int64_t c = 0; c < 3; ++c) std::copy(src.data(), src.data() + n, out.data() + c * n);
  } else {
    throw Error("an image of " + std::to_string(src.size(0)) + " channels cannot become " +
                std::to_string(channels));
  }
  return out;
}

Tensor resize_image(const Tensor& image, std::int64_t height, std::int64_t width) {
  if (image.dim() != 3)
    throw Error("resize_image: expected [channels, height, width], got " + shape_text(image.shape()));
  if (height < 1 || width < 1)
    throw Error("resize_image: a size of " + std::to_string(height) + "x" + std::to_string(width));
  const Tensor src = image.contiguous();
  const std::int64_t channels = src.size(0), in_h = src.size(1), in_w = src.size(2);
  if (in_h == height && in_w == width) return src;
  const AxisWeights across = axis_weights(in_w, width), down = axis_weights(in_h, height);
  // Rows first (to the new width), then columns: separable, as PIL and PyTorch do.
  std::vector<float> wide(static_cast<std::size_t>(channels * in_h * width));
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t y = 0; y < in_h; ++y) {
      const float* row = src.data() + (c * in_h + y) * in_w;
      float* out = wide.data() + (c * in_h + y) * width;
      for (std::int64_t x = 0; x < width; ++x) {
        const auto& w = across.weights[static_cast<std::size_t>(x)];
        const float* from = row + across.first[static_cast<std::size_t>(x)];
        float sum = 0;
        for (std::size_t k = 0; k < w.size(); ++k) sum += w[k] * from[k];
        out[x] = sum;
      }
    }
  Tensor result = Tensor::empty({channels, height, width});
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t y = 0; y < height; ++y) {
      const auto& w = down.weights[static_cast<std::size_t>(y)];
      const float* from = wide.data() + (c * in_h + down.first[static_cast<std::size_t>(y)]) * width;
      float* out = result.data() + (c * height + y) * width;
      std::fill(out, out + width, 0.0f);
      for (std::size_t k = 0; k < w.size(); ++k)
        for (std::int64_t x = 0; x < width; ++x)
          out[x] += w[k] * from[static_cast<std::int64_t>(k) * width + x];
    }
  return result;
}

}  // namespace cpudl::data
