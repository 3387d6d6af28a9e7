// 2-D max and average pooling through oneDNN, forward and backward. Max pooling in training keeps
// oneDNN's argmax workspace in a caller-owned buffer, so backward needs no recomputation.
#include <string>

#include "dense/onednn/dense.h"
#include "dense/onednn/executable.h"
#include "dense/onednn/primitive_cache.h"

namespace cpudl::onednn {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

using dt = dnnl::memory::data_type;

PrimitiveKey pool_key(PrimitiveKind op, const PoolShape& s, bool training, dt type = dt::f32) {
  PrimitiveKey key(op);
  key.add(static_cast<int>(type));
  key.add(s.batch).add(s.channels).add(s.height).add(s.width).add(s.kernel_h).add(s.kernel_w).add(s.stride_h);
  key.add(s.stride_w).add(s.pad_h).add(s.pad_w).add(static_cast<int>(s.kind)).add(static_cast<int>(s.layout));
  key.add(training);
  return key;
}

dnnl::algorithm algorithm_of(PoolKind kind) {
  switch (kind) {
    case PoolKind::max:
      return dnnl::algorithm::pooling_max;
    case PoolKind::avg_include_padding:
      return dnnl::algorithm::pooling_avg_include_padding;
    case PoolKind::avg_exclude_padding:
      return dnnl::algorithm::pooling_avg_exclude_padding;
  }
  return dnnl::algorithm::pooling_max;
}

struct PoolDescs {
  dnnl::memory::desc src, dst;
  dims strides, kernel, pad_l, pad_r;
};

PoolDescs descs(const PoolShape& s, dt type = dt::f32) {
  const tag t = activation_tag(s.layout);
  const std::int64_t oh = s.out_height(), ow = s.out_width();
  return PoolDescs{dnnl::memory::desc({s.batch, s.channels, s.height, s.width}, type, t),
                   dnnl::memory::desc({s.batch, s.channels, oh, ow}, type, t),
                   {s.stride_h, s.stride_w},
                   {s.kernel_h, s.kernel_w},
                   {s.pad_h, s.pad_w},
                   {(oh - 1) * s.stride_h + s.kernel_h - s.height - s.pad_h,
                    (ow - 1) * s.stride_w + s.kernel_w - s.width - s.pad_w}};
}

dnnl::pooling_forward::primitive_desc forward_pd(const PoolShape& s, bool training, dt type = dt::f32) {
  const PoolDescs d = descs(s, type);
  const dnnl::pooling_forward::desc desc(
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, algorithm_of(s.kind),
      d.src, d.dst, d.strides, d.kernel, d.pad_l, d.pad_r);
  return dnnl::pooling_forward::primitive_desc(desc, engine());
}

bool needs_workspace(const PoolShape& s) { return s.kind == PoolKind::max; }

struct PoolEntry {
  Executable exec;
  bool workspace = false;
};

// The forward primitive for this shape, training mode and data type, made once and cached.
std::shared_ptr<PoolEntry> forward_entry(const PoolShape& s, bool training, dt type) {
  static PrimitiveCache<PoolEntry> cache;
  return with_context([&] { return describe(s) + (type == dt::u8 ? " (uint8)" : ""); },
                      [&] {
                        return cache.get(pool_key(PrimitiveKind::pool_forward, s, training, type), [&] {
                          const auto pd = forward_pd(s, training, type);
                          auto e = std::make_shared<PoolEntry>();
                          e->exec.set_primitive(dnnl::pooling_forward(pd));
                          e->exec.bind(DNNL_ARG_SRC, pd.src_desc());
                          e->exec.bind(DNNL_ARG_DST, pd.dst_desc());
                          e->workspace = training;
                          if (training) e->exec.bind(DNNL_ARG_WORKSPACE, pd.workspace_desc());
                          return e;
                        });
                      });
}

}  // namespace

std::size_t pool2d_workspace_bytes(const PoolShape& s) {
  s.validate();
  if (!needs_workspace(s)) return 0;
  return with_context([&] { return describe(s); },
                      [&] { return forward_pd(s, true).workspace_desc().get_size(); });
}

void pool2d_forward(const PoolShape& s, const float* src, float* dst, void* workspace) {
  s.validate();
  const bool training = workspace != nullptr && needs_workspace(s);
  const auto entry = forward_entry(s, training, dt::f32);
  if (entry->workspace)
    entry->exec.run({src, dst, workspace});
  else
    entry->exec.run({src, dst});
}

void max_pool2d_forward_u8(const PoolShape& s, const std::uint8_t* src, std::uint8_t* dst) {
  s.validate();
  if (s.kind != PoolKind::max) throw Error(describe(s) + ": only max pooling takes uint8 values");
  forward_entry(s, false, dt::u8)->exec.run({src, dst});
}

void pool2d_backward(const PoolShape& s, const float* diff_dst, const void* workspace, float* diff_src) {
  s.validate();
  if (needs_workspace(s) && workspace == nullptr)
    throw Error(describe(s) + " backward: needs the workspace written by the training forward pass");
  static PrimitiveCache<PoolEntry> cache;
  const auto entry =
      with_context([&] { return describe(s) + " backward"; },
                   [&] {
                     return cache.get(pool_key(PrimitiveKind::pool_backward, s, true), [&] {
                       const PoolDescs d = descs(s);
                       const auto hint = forward_pd(s, true);
                       const dnnl::pooling_backward::desc desc(algorithm_of(s.kind), d.src, d.dst, d.strides,
                                                               d.kernel, d.pad_l, d.pad_r);
                       const dnnl::pooling_backward::primitive_desc pd(desc, engine(), hint);
                       auto e = std::make_shared<PoolEntry>();
                       e->exec.set_primitive(dnnl::pooling_backward(pd));
                       e->exec.bind(DNNL_ARG_DIFF_DST, d.dst);
                       e->exec.bind(DNNL_ARG_DIFF_SRC, d.src);
                       e->workspace = needs_workspace(s);
                       if (e->workspace) e->exec.bind(DNNL_ARG_WORKSPACE, hint.workspace_desc());
                       return e;
                     });
                   });
  if (entry->workspace)
    entry->exec.run({diff_dst, diff_src, workspace});
  else
    entry->exec.run({diff_dst, diff_src});
}

}  // namespace cpudl::onednn
