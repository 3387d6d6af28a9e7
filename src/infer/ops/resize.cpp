// Resize (opsets 11-17): nearest and linear, with the coordinate transformations PyTorch exports
// (asymmetric for nn.Upsample's nearest, pytorch_half_pixel / half_pixel / align_corners for
// bilinear). Separable: one 1-D pass per resized axis, each output index reading at most two input
// indices with weights from a table built once per plan; the passes after the first write into
// intermediate buffers the kernel owns. Nearest needs no weights, linear is exact as a product of
// 1-D interpolations.
#include <cmath>
#include <cstring>

#include "dense/onednn/dense.h"
#include "infer/op_registry.h"
#include "runtime/parallel.h"

namespace cpudl::infer {
namespace {

struct AxisPass {
  std::size_t axis = 0;
  std::int64_t outer = 1, in = 1, out = 1, inner = 1;  // the input seen as [outer, in, inner]
  std::vector<std::int64_t> first, second;             // per output index: the input indices read
  std::vector<float> weight;                           // of `second` (linear); 0 for nearest
};

double source_coordinate(const std::string& mode, std::int64_t x, double scale, std::int64_t in,
                         std::int64_t out) {
  const double xd = static_cast<double>(x);
  if (mode == "half_pixel") return (xd + 0.5) / scale - 0.5;
  if (mode == "pytorch_half_pixel") return out > 1 ? (xd + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners")
    return out == 1 ? 0.0 : xd * static_cast<double>(in - 1) / static_cast<double>(out - 1);
  if (mode == "asymmetric") return xd / scale;
  return (xd + 0.5) / scale;  // tf_half_pixel_for_nn
}

std::int64_t nearest_index(const std::string& mode, double x) {
  double i;
  if (mode == "floor")
    i = std::floor(x);
  else if (mode == "ceil")
    i = std::ceil(x);
  else if (mode == "round_prefer_ceil")
    i = std::floor(x + 0.5);
  else  // round_prefer_floor
    i = x - std::floor(x) == 0.5 ? std::floor(x) : std::round(x);
  return static_cast<std::int64_t>(i);
}

Kernel build_resize(OpSetup& s) {
  s.require_inputs(1, 4);
  s.require_f32(0);
  const Shape& x = s.shape(0);
  const std::string mode = s.node.get_string("mode", "nearest");
  const std::string transform = s.node.get_string("coordinate_transformation_mode", "half_pixel");
  const std::string nearest_mode = s.node.get_string("nearest_mode", "round_prefer_floor");
  if (mode != "nearest" && mode != "linear")
    s.fail("mode '" + mode + "' is not supported (nearest, linear are)");
  if (transform != "half_pixel" && transform != "pytorch_half_pixel" && transform != "align_corners" &&
      transform != "asymmetric" && transform != "tf_half_pixel_for_nn")
    s.fail("coordinate_transformation_mode '" + transform + "' is not supported");
  if (nearest_mode != "round_prefer_floor" && nearest_mode != "round_prefer_ceil" &&
      nearest_mode != "floor" && nearest_mode != "ceil")
    s.fail("nearest_mode '" + nearest_mode + "' is not supported");
  std::vector<float> scales;
  std::vector<std::int64_t> sizes;
  if (s.has(2)) scales = s.constant(2, "scales").as_float();
  if (s.has(3)) sizes = s.constant(3, "sizes").as_int64();
  if (scales.empty() == sizes.empty()) s.fail("needs exactly one of scales and sizes");
  Shape out = x;
  std::vector<double> scale(x.size(), 1.0);
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (!sizes.empty()) {
      if (sizes.size() != x.size())
        s.fail("sizes has " + std::to_string(sizes.size()) + " entries for rank " + std::to_string(x.size()));
      out[d] = sizes[d];
      scale[d] = x[d] > 0 ? static_cast<double>(sizes[d]) / static_cast<double>(x[d]) : 1.0;
    } else {
      if (scales.size() != x.size())
        s.fail("scales has " + std::to_string(scales.size()) + " entries for rank " +
               std::to_string(x.size()));
      if (!(scales[d] > 0))
        s.fail("scales[" + std::to_string(d) + "] = " + std::to_string(scales[d]) + " is not positive");
      scale[d] = scales[d];
      out[d] = static_cast<std::int64_t>(std::floor(static_cast<double>(x[d]) * scales[d]));
    }
    if (out[d] < 0) s.fail("output dimension " + std::to_string(d) + " is negative");
  }
  s.set_output(0, DType::f32, out);
  // How the values are stored: the logical axes in memory order (the optimiser's channels-last or
  // channel-block region keeps N and C and resizes H and W where they lie; a block of channels is
  // a last physical axis that no pass resizes).
  std::vector<std::size_t> order(x.size());
  for (std::size_t d = 0; d < x.size(); ++d) order[d] = d;
  Shape physical = x;
  const auto layout = static_cast<onednn::ActivationLayout>(s.node.get_int("cpudl.layout", 0));
  if (layout != onednn::ActivationLayout::nchw) {
    if (x.size() != 4 || out[0] != x[0] || out[1] != x[1]) s.fail("resizes N or C of a channels-last value");
    if (layout == onednn::ActivationLayout::nhwc) {
      order = {0, 2, 3, 1};
      physical = {x[0], x[2], x[3], x[1]};
    } else {
      const std::int64_t block = onednn::blocked_layout_channels();
      order = {0, 1, 2, 3, 4};  // 4: the block
      physical = {x[0], x[1] / block, x[2], x[3], block};
    }
  }
  // One pass per resized axis, in memory order, each over the shape the previous passes left.
  auto passes = std::make_shared<std::vector<AxisPass>>();
  Shape current = physical;
  for (std::size_t at = 0; at < order.size(); ++at) {
    const std::size_t d = order[at];
    if (d >= x.size() || (layout == onednn::ActivationLayout::blocked && at == 1)) continue;  // the blocks
    if (out[d] == x[d] && scale[d] == 1.0) continue;
    AxisPass p;
    p.axis = at;
    for (std::size_t k = 0; k < at; ++k) p.outer *= current[k];
    for (std::size_t k = at + 1; k < current.size(); ++k) p.inner *= current[k];
    p.in = x[d];
    p.out = out[d];
    for (std::int64_t i = 0; i < p.out && p.in > 0; ++i) {
      const double c = source_coordinate(transform, i, scale[d], p.in, p.out);
      if (mode == "nearest") {
        const std::int64_t j = std::clamp<std::int64_t>(nearest_index(nearest_mode, c), 0, p.in - 1);
        p.first.push_back(j);
        p.second.push_back(j);
        p.weight.push_back(0.0f);
      } else {
        const double clamped = std::clamp(c, 0.0, static_cast<double>(p.in - 1));
        const auto j = static_cast<std::int64_t>(std::floor(clamped));
        p.first.push_back(j);
        p.second.push_back(std::min(j + 1, p.in - 1));
        p.weight.push_back(static_cast<float>(clamped - static_cast<double>(j)));
      }
    }
    current[at] = out[d];
    passes->push_back(std::move(p));
  }
  // Buffers between passes: all but the last pass write to one of them.
  auto buffers = std::make_shared<std::vector<std::vector<float>>>();
  {
    Shape shape = physical;
    for (std::size_t i = 0; i + 1 < passes->size(); ++i) {
      shape[(*passes)[i].axis] = (*passes)[i].out;
      buffers->emplace_back(static_cast<std::size_t>(shape_numel(shape)));
    }
  }
  const bool linear = mode == "linear";
  const std::int64_t elements = shape_numel(out);
  return [passes, buffers, linear, elements](std::span<const TensorView> in, std::span<const TensorView> o) {
    if (passes->empty()) {
      if (elements > 0)
        std::memcpy(o[0].f32(), in[0].f32(), static_cast<std::size_t>(elements) * sizeof(float));
      return;
    }
    const float* src = in[0].f32();
    for (std::size_t i = 0; i < passes->size(); ++i) {
      const AxisPass& p = (*passes)[i];
      float* dst = i + 1 == passes->size() ? o[0].f32() : (*buffers)[i].data();
      parallel_for(static_cast<std::size_t>(p.outer), 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t r = b; r < e; ++r) {
          const float* from = src + static_cast<std::int64_t>(r) * p.in * p.inner;
          float* to = dst + static_cast<std::int64_t>(r) * p.out * p.inner;
          for (std::int64_t j = 0; j < p.out; ++j) {
            const float* a = from + p.first[static_cast<std::size_t>(j)] * p.inner;
            float* t = to + j * p.inner;
            if (!linear) {
              std::memcpy(t, a, static_cast<std::size_t>(p.inner) * sizeof(float));
              continue;
            }
            const float* c = from + p.second[static_cast<std::size_t>(j)] * p.inner;
            const float w = p.weight[static_cast<std::size_t>(j)];
            for (std::int64_t k = 0; k < p.inner; ++k) t[k] = a[k] + w * (c[k] - a[k]);
          }
        }
      });
      src = dst;
    }
  };
}

const OpEntry kOps[] = {
    {"Resize", build_resize},
};

}  // namespace

std::span<const OpEntry> resize_ops() { return kOps; }

}  // namespace cpudl::infer
