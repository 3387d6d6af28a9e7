// RoiAlign (opsets 10 and 16): each region of interest pooled to a fixed grid by bilinear samples,
// averaged (or, in "max" mode, ONNX Runtime's maximum of weighted corners), as two-stage detectors'
// box heads read their features. Opset 10's coordinates are torchvision's aligned=False
// ("output_half_pixel"); opset 16 adds "half_pixel", aligned=True.
#include <algorithm>
#include <cmath>

#include "infer/op_registry.h"
#include "runtime/parallel.h"

namespace cpudl::infer {
namespace {

Kernel build_roi_align(OpSetup& s) {
  s.require_inputs(3, 3);
  s.require_f32(0);
  s.require_f32(1);
  const Shape& x = s.shape(0);
  const Shape& rois = s.shape(1);
  if (x.size() != 4) s.fail("X must be [N, C, H, W], got " + shape_text(x));
  if (rois.size() != 2 || rois[1] != 4) s.fail("rois must be [num_rois, 4], got " + shape_text(rois));
  if (s.inputs[2].dtype != DType::i64 && s.inputs[2].dtype != DType::i32)
    s.fail("batch_indices must be INT64");
  if (s.shape(2) != Shape{rois[0]}) s.fail("batch_indices must be [" + std::to_string(rois[0]) + "]");
  const std::string mode = s.node.get_string("mode", "avg");
  if (mode != "avg" && mode != "max") s.fail("mode '" + mode + "' is not 'avg' or 'max'");
  const std::int64_t oh = s.node.get_int("output_height", 1), ow = s.node.get_int("output_width", 1);
  const std::int64_t sampling = s.node.get_int("sampling_ratio", 0);
  const float scale = s.node.get_float("spatial_scale", 1.0f);
  const std::string transform =
      s.node.get_string("coordinate_transformation_mode", s.opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (transform != "half_pixel" && transform != "output_half_pixel")
    s.fail("coordinate_transformation_mode '" + transform + "' is not supported");
  if (oh < 1 || ow < 1 || sampling < 0)
    s.fail("output_height, output_width must be positive, sampling_ratio >= 0");
  s.set_output(0, DType::f32, {rois[0], x[1], oh, ow});
  const bool half_pixel = transform == "half_pixel", average = mode == "avg";
  const std::int64_t batch = x[0], channels = x[1], height = x[2], width = x[3];
  const std::string label = s.node.label();
  return [=](std::span<const TensorView> in, std::span<const TensorView> o) {
    const std::int64_t count = (*in[1].shape)[0];
    const float* features = in[0].f32();
    const float* boxes = in[1].f32();
    float* out = o[0].f32();
    for (std::int64_t r = 0; r < count; ++r) {
      const std::int64_t b = in[2].dtype == DType::i64 ? static_cast<const std::int64_t*>(in[2].data)[r]
                                                       : static_cast<const std::int32_t*>(in[2].data)[r];
      if (b < 0 || b >= batch)
        throw Error(label + ": batch index " + std::to_string(b) + " is out of range [0, " +
                    std::to_string(batch) + ")");
    }
    parallel_for(static_cast<std::size_t>(count * channels), 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t job = begin; job < end; ++job) {
        const auto r = static_cast<std::int64_t>(job) / channels,
                   c = static_cast<std::int64_t>(job) % channels;
        const std::int64_t b = in[2].dtype == DType::i64 ? static_cast<const std::int64_t*>(in[2].data)[r]
                                                         : static_cast<const std::int32_t*>(in[2].data)[r];
        const float* plane = features + (b * channels + c) * height * width;
        const float offset = half_pixel ? 0.5f : 0.0f;
        const float x1 = boxes[r * 4] * scale - offset, y1 = boxes[r * 4 + 1] * scale - offset;
        const float x2 = boxes[r * 4 + 2] * scale - offset, y2 = boxes[r * 4 + 3] * scale - offset;
        float roi_w = x2 - x1, roi_h = y2 - y1;
        if (!half_pixel) roi_w = std::max(roi_w, 1.0f), roi_h = std::max(roi_h, 1.0f);
        const float bin_h = roi_h / static_cast<float>(oh), bin_w = roi_w / static_cast<float>(ow);
        const std::int64_t grid_h =
            sampling > 0 ? sampling : static_cast<std::int64_t>(std::ceil(roi_h / static_cast<float>(oh)));
        const std::int64_t grid_w =
            sampling > 0 ? sampling : static_cast<std::int64_t>(std::ceil(roi_w / static_cast<float>(ow)));
        const float samples = static_cast<float>(std::max<std::int64_t>(grid_h * grid_w, 1));
        float* dst = out + (r * channels + c) * oh * ow;
        for (std::int64_t ph = 0; ph < oh; ++ph)
          for (std::int64_t pw = 0; pw < ow; ++pw) {
            float acc = 0.0f;
            bool first = true;
            for (std::int64_t iy = 0; iy < grid_h; ++iy) {
              float y = y1 + static_cast<float>(ph) * bin_h +
                        (static_cast<float>(iy) + 0.5f) * bin_h / static_cast<float>(grid_h);
              for (std::int64_t ix = 0; ix < grid_w; ++ix) {
                float xx = x1 + static_cast<float>(pw) * bin_w +
                           (static_cast<float>(ix) + 0.5f) * bin_w / static_cast<float>(grid_w);
                float v = 0.0f;
                if (!(y < -1.0f || y > static_cast<float>(height) || xx < -1.0f ||
                      xx > static_cast<float>(width))) {
                  float yy = std::max(y, 0.0f);
                  xx = std::max(xx, 0.0f);
                  auto y_low = static_cast<std::int64_t>(yy), x_low = static_cast<std::int64_t>(xx);
                  std::int64_t y_high, x_high;
                  if (y_low >= height - 1) {
                    y_high = y_low = height - 1;
                    yy = static_cast<float>(y_low);
                  } else {
                    y_high = y_low + 1;
                  }
                  if (x_low >= width - 1) {
                    x_high = x_low = width - 1;
                    xx = static_cast<float>(x_low);
                  } else {
                    x_high = x_low + 1;
                  }
                  const float ly = yy - static_cast<float>(y_low), lx = xx - static_cast<float>(x_low);
                  const float hy = 1.0f - ly, hx = 1.0f - lx;
                  const float a = hy * hx * plane[y_low * width + x_low],
                              bb = hy * lx * plane[y_low * width + x_high];
                  const float cc = ly * hx * plane[y_high * width + x_low],
                              d = ly * lx * plane[y_high * width + x_high];
                  v = average ? a + bb + cc + d : std::max({a, bb, cc, d});
                }
                if (average)
                  acc += v;
                else
                  acc = first ? v : std::max(acc, v);
                first = false;
              }
            }
            dst[ph * ow + pw] = average ? acc / samples : acc;
          }
      }
    });
  };
}

const OpEntry kOps[] = {
    {"RoiAlign", build_roi_align},
};

}  // namespace

std::span<const OpEntry> roi_align_ops() { return kOps; }

}  // namespace cpudl::infer
