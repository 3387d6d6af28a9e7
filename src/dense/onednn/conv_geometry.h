// A 2-D convolution's oneDNN descriptors (f32 activations in the shape's layouts, weights plain
// and "any", bias) and window (strides, dilations, padding): shared by the float, bf16 and int8
// convolutions, which retype the descriptors they compute in.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "dense/onednn/executable.h"

namespace cpudl::onednn {

struct Geometry {
  dnnl::memory::desc src, dst, weights_plain, weights_any, bias;
  dnnl::memory::dims strides, dilates, pad_l, pad_r;
};

inline Geometry geometry(const ConvShape& s) {
  using tag = dnnl::memory::format_tag;
  Geometry g;
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  g.src = plain_desc({s.batch, s.in_channels, s.height, s.width}, activation_tag(s.layout));
  g.dst = plain_desc({s.batch, s.out_channels, oh, ow}, activation_tag(s.dst_layout.value_or(s.layout)));
  if (s.groups == 1) {
    const dnnl::memory::dims w = {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
    g.weights_plain = plain_desc(w, tag::oihw);
    g.weights_any = plain_desc(w, tag::any);
  } else {
    const dnnl::memory::dims w = {s.groups, s.out_channels / s.groups, s.in_channels / s.groups, s.kernel_h,
                                  s.kernel_w};
    g.weights_plain = plain_desc(w, tag::goihw);
    g.weights_any = plain_desc(w, tag::any);
  }
  g.bias = plain_desc({s.out_channels}, tag::x);
  g.strides = {s.stride_h, s.stride_w};
  g.dilates = {s.dilation_h - 1, s.dilation_w - 1};  // oneDNN counts dilation from 0
  g.pad_l = {s.pad_h, s.pad_w};
  // Right padding that makes oneDNN's output size equal the floor formula's.
  g.pad_r = {(oh - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1 - s.height - s.pad_h,
             (ow - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1 - s.width - s.pad_w};
  return g;
}

// `md` with its dimensions and layout, holding `type` instead.
inline dnnl::memory::desc retyped(const dnnl::memory::desc& md, dnnl::memory::data_type type,
                                  dnnl::memory::format_tag layout) {
  return dnnl::memory::desc(md.dims(), type, layout);
}

}  // namespace cpudl::onednn
