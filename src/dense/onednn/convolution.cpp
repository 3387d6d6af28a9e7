// 2-D convolution through oneDNN: forward (bias, residual add and ReLU fused), backward data and
// backward weights. Activations stay in the caller's layout; weights are reordered to the
// primitive's blocked layout once per weights version.
#include <algorithm>
#include <mutex>
#include <optional>
#include <string>

#include "dense/onednn/conv_geometry.h"
#include "dense/onednn/dense.h"
#include "dense/onednn/executable.h"
#include "dense/onednn/primitive_cache.h"

namespace cpudl::onednn {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

PrimitiveKey conv_key(PrimitiveKind op, const ConvShape& s) {
  PrimitiveKey key(op);
  key.add(s.batch)
      .add(s.in_channels)
      .add(s.height)
      .add(s.width)
      .add(s.out_channels)
      .add(s.kernel_h)
      .add(s.kernel_w);
  key.add(s.stride_h)
      .add(s.stride_w)
      .add(s.pad_h)
      .add(s.pad_w)
      .add(s.dilation_h)
      .add(s.dilation_w)
      .add(s.groups);
  key.add(static_cast<int>(s.layout)).add(s.dst_layout ? static_cast<int>(*s.dst_layout) : -1);
  return key;
}

// Cached weights belong to one layer: layers of equal shape must not share an entry, or each call
// would find the other layer's blocked copy and reorder again (ResNet-18 has four 64->64 3x3
// convolutions). Weights reordered on every call (version 0) need no identity.
void add_weights_identity(PrimitiveKey& key, const float* weights, std::uint64_t version) {
  if (version != 0) key.add(static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(weights)));
}

dnnl::convolution_forward::primitive_desc forward_pd(
    const Geometry& g, bool bias, const dnnl::primitive_attr& attr,
    dnnl::prop_kind prop = dnnl::prop_kind::forward_training) {
  const auto desc =
      bias ? dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, g.src, g.weights_any,
                                             g.bias, g.dst, g.strides, g.dilates, g.pad_l, g.pad_r)
           : dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, g.src, g.weights_any,
                                             g.dst, g.strides, g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, engine());
}

// The post-ops of a forward convolution: residual add, activation, then the depthwise stage and
// its activation.
dnnl::post_ops forward_post_ops(const Geometry& g, const ConvEpilogue& e) {
  dnnl::post_ops ops;
  if (e.residual) ops.append_binary(dnnl::algorithm::binary_add, g.dst);
  append_activation(ops, static_cast<int>(e.activation), e.clip_min, e.clip_max);
  if (const DepthwiseStage* dw = e.depthwise) {
    using dt = dnnl::memory::data_type;
    ops.append_dw(dt::f32, dt::f32, dt::f32, 3, dw->stride, 1, 0, {});
    append_activation(ops, static_cast<int>(dw->activation), dw->clip_min, dw->clip_max);
  }
  return ops;
}

// The forward primitive, or (depthwise fusion only) null where oneDNN has no fused kernel for the
// shape or would compute another output size than ONNX's (H - 1) / stride + 1.
std::optional<dnnl::convolution_forward::primitive_desc> try_forward_pd(const ConvShape& s, const Geometry& g,
                                                                        bool bias, const ConvEpilogue& e) {
  dnnl::primitive_attr attr;
  attr.set_post_ops(forward_post_ops(g, e));
  if (!e.depthwise) return forward_pd(g, bias, attr);
  try {
    auto pd = forward_pd(g, bias, attr, dnnl::prop_kind::forward_inference);
    const dims want = {s.batch, s.out_channels, e.depthwise->out_size(s.height),
                       e.depthwise->out_size(s.width)};
    if (pd.dst_desc().dims() != want) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

void validate_depthwise(const ConvShape& s, const ConvEpilogue& e) {
  if (!e.depthwise) return;
  const bool pointwise = s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
                         s.pad_h == 0 && s.pad_w == 0 && s.groups == 1;
  const bool blocked =
      s.layout == ActivationLayout::blocked && s.dst_layout.value_or(s.layout) == ActivationLayout::blocked;
  if (!pointwise || !blocked || e.residual || (e.depthwise->stride != 1 && e.depthwise->stride != 2))
    throw Error("conv2d " + describe(s) +
                ": a fused depthwise stage needs a blocked 1x1 stride-1 convolution without "
                "residual, and depthwise stride 1 or 2");
}

// Weights in the primitive's layout: the caller's OIHW buffer when the layouts agree, otherwise
// a blocked copy refreshed only when (pointer, version) changes.
struct WeightsCache {
  bool needs_reorder = false;
  dnnl::memory plain, blocked;
  const void* source = nullptr;
  std::uint64_t version = 0;

  void init(const dnnl::memory::desc& plain_md, const dnnl::memory::desc& wanted) {
    needs_reorder = plain_md != wanted;
    if (!needs_reorder) return;
    plain = dnnl::memory(plain_md, engine(), DNNL_MEMORY_NONE);
    blocked = dnnl::memory(wanted, engine());
  }
  // Binds `arg`: the blocked copy, or a per-call slot for the caller's buffer.
  void bind(Executable& exec, const dnnl::memory::desc& plain_md, int arg = DNNL_ARG_WEIGHTS) {
    if (needs_reorder)
      exec.bind_owned(arg, blocked);
    else
      exec.bind(arg, plain_md);
  }
  void refresh(const float* weights, std::uint64_t weights_version) {
    if (!needs_reorder) return;
    if (weights_version != 0 && source == weights && version == weights_version) return;
    plain.set_data_handle(const_cast<float*>(weights));
    reorder(plain, blocked);
    source = weights;
    version = weights_version;
  }
};

struct ForwardEntry {
  Executable exec;
  WeightsCache weights, depthwise_weights;
  bool depthwise_bias_owned = false;  // a zero bias for a depthwise stage without one
};

// The weight gradient in PyTorch's OIHW: written by the primitive in place when it computes in
// that layout, otherwise into a blocked buffer the entry owns and reordered out after each run.
struct WeightGradientOut {
  bool reorder_out = false;
  dnnl::memory blocked, plain;
  // Binds DNNL_ARG_DIFF_WEIGHTS: a per-call slot for the caller's buffer, or the blocked buffer.
  void init(Executable& exec, const dnnl::memory::desc& computed, const dnnl::memory::desc& plain_md) {
    reorder_out = computed != plain_md;
    if (!reorder_out) {
      exec.bind(DNNL_ARG_DIFF_WEIGHTS, plain_md);
      return;
    }
    blocked = dnnl::memory(computed, engine());
    plain = dnnl::memory(plain_md, engine(), DNNL_MEMORY_NONE);
    exec.bind_owned(DNNL_ARG_DIFF_WEIGHTS, blocked);
  }
  void finish(float* diff_weights) {
    if (!reorder_out) return;
    plain.set_data_handle(diff_weights);
    reorder(blocked, plain);
  }
};

dnnl::convolution_backward_weights::desc backward_weights_desc(const Geometry& g,
                                                               const dnnl::memory::desc& src,
                                                               const dnnl::memory::desc& dst, bool bias) {
  const auto algo = dnnl::algorithm::convolution_direct;
  return bias ? dnnl::convolution_backward_weights::desc(algo, src, g.weights_any, g.bias, dst, g.strides,
                                                         g.dilates, g.pad_l, g.pad_r)
              : dnnl::convolution_backward_weights::desc(algo, src, g.weights_any, dst, g.strides, g.dilates,
                                                         g.pad_l, g.pad_r);
}

// Runs a backward-weights entry whose remaining slots are [diff_bias], [diff_weights when plain]
// after `first` (the f32 pass's src and diff_dst; none for the bf16 pass, whose are staged).
template <class Entry>
void run_backward_weights(Entry& entry, std::initializer_list<const void*> first, float* diff_weights,
                          float* diff_bias) {
  const void* pointers[4];
  std::size_t n = 0;
  for (const void* p : first) pointers[n++] = p;
  if (diff_bias) pointers[n++] = diff_bias;
  if (!entry.diff_weights.reorder_out) pointers[n++] = diff_weights;
  entry.exec.run(std::span<const void* const>(pointers, n));
  entry.diff_weights.finish(diff_weights);
}

// The bf16 passes: their arguments staged in bf16, then the convolution accumulating in f32. The
// mutex keeps a staged copy from being overwritten by a concurrent caller before it is read.
struct Bf16ForwardEntry {
  Executable exec;
  Bf16Staging src;
  WeightsCache weights;
  std::mutex mutex;
};

struct Bf16BackwardDataEntry {
  Executable exec;
  Bf16Staging diff_dst;
  WeightsCache weights;
  std::mutex mutex;
};

struct Bf16BackwardWeightsEntry {
  Executable exec;
  Bf16Staging src, diff_dst;
  WeightGradientOut diff_weights;
  std::mutex mutex;
};

dnnl::memory::desc bf16_desc(const dnnl::memory::desc& md, tag t) {
  return retyped(md, dnnl::memory::data_type::bf16, t);
}

// The forward descriptor of a bf16 convolution (f32 bias and output): the primitive itself, or
// the hint its backward passes need.
dnnl::convolution_forward::primitive_desc bf16_forward_pd(const ConvShape& s, const Geometry& g, bool bias,
                                                          const dnnl::primitive_attr& attr) {
  const auto src = bf16_desc(g.src, activation_tag(s.layout)), weights = bf16_desc(g.weights_any, tag::any);
  const auto prop = dnnl::prop_kind::forward_training;
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto desc = bias ? dnnl::convolution_forward::desc(prop, algo, src, weights, g.bias, g.dst, g.strides,
                                                           g.dilates, g.pad_l, g.pad_r)
                         : dnnl::convolution_forward::desc(prop, algo, src, weights, g.dst, g.strides,
                                                           g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, engine());
}

// The forward may change layout on the way (a first layer reading NCHW images, writing NHWC);
// the backward passes take one plain layout.
void require_plain_bf16_layout(const ConvShape& s, bool forward = false) {
  if (!dense::plain_planes(s.layout) || !dense::plain_planes(s.dst_layout.value_or(s.layout)) ||
      (!forward && s.dst_layout))
    throw Error("conv2d " + describe(s) + ": the bf16 passes take NCHW or NHWC activations in and out");
}

struct BackwardDataEntry {
  Executable exec;
  WeightsCache weights;
};

struct BackwardWeightsEntry {
  Executable exec;
  WeightGradientOut diff_weights;
};

}  // namespace

bool depthwise_fusion_supported(const ConvShape& s, std::int64_t stride) {
  DepthwiseStage dw;
  dw.stride = stride;
  ConvEpilogue e;
  e.depthwise = &dw;
  try {
    s.validate();
    validate_depthwise(s, e);
  } catch (const Error&) {
    return false;
  }
  return try_forward_pd(s, geometry(s), true, e).has_value();
}

void conv2d_forward(const ConvShape& s, const float* src, const float* weights, std::uint64_t weights_version,
                    const float* bias, float* dst, const ConvEpilogue& epilogue) {
  s.validate();
  validate_depthwise(s, epilogue);
  const DepthwiseStage* dw = epilogue.depthwise;
  static PrimitiveCache<ForwardEntry> cache;
  PrimitiveKey key = conv_key(PrimitiveKind::conv_forward, s);
  add_weights_identity(key, weights, weights_version);
  key.add(bias != nullptr).add(static_cast<int>(epilogue.activation)).add(epilogue.residual != nullptr);
  key.add(float_bits(epilogue.clip_min)).add(float_bits(epilogue.clip_max));
  key.add(dw ? dw->stride : 0);
  if (dw) {
    add_weights_identity(key, dw->weights, weights_version);
    key.add(dw->bias != nullptr).add(static_cast<int>(dw->activation));
    key.add(float_bits(dw->clip_min)).add(float_bits(dw->clip_max));
  }
  const auto entry = with_context(
      [&] { return "conv2d " + describe(s); },
      [&] {
        return cache.get(key, [&] {
          const Geometry g = geometry(s);
          const auto pd = try_forward_pd(s, g, bias != nullptr, epilogue);
          if (!pd)
            throw Error("conv2d " + describe(s) + ": oneDNN has no fused depthwise kernel for this shape");
          auto e = std::make_shared<ForwardEntry>();
          e->exec.set_primitive(dnnl::convolution_forward(*pd));
          e->weights.init(g.weights_plain, pd->weights_desc());
          e->exec.bind(DNNL_ARG_SRC, g.src);
          e->exec.bind(DNNL_ARG_DST, pd->dst_desc());
          if (bias) e->exec.bind(DNNL_ARG_BIAS, g.bias);
          if (epilogue.residual) e->exec.bind(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, g.dst);
          e->weights.bind(e->exec, g.weights_plain);
          if (dw) {
            constexpr int kDwWeights = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS;
            constexpr int kDwBias = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;
            const auto dw_plain = plain_desc({s.out_channels, 1, 1, 3, 3}, tag::goihw);
            const auto dw_wanted = pd->query_md(dnnl::query::exec_arg_md, kDwWeights);
            e->depthwise_weights.init(dw_plain, dw_wanted);
            e->depthwise_weights.bind(e->exec, dw_plain, kDwWeights);
            const auto dw_bias = pd->query_md(dnnl::query::exec_arg_md, kDwBias);
            e->depthwise_bias_owned = dw->bias == nullptr;
            if (e->depthwise_bias_owned) {
              dnnl::memory zeros(dw_bias, engine());
              std::fill_n(static_cast<float*>(zeros.get_data_handle()), s.out_channels, 0.0f);
              e->exec.bind_owned(kDwBias, zeros);
            } else {
              e->exec.bind(kDwBias, dw_bias);
            }
          }
          return e;
        });
      });
  entry->weights.refresh(weights, weights_version);
  if (dw) entry->depthwise_weights.refresh(dw->weights, weights_version);
  // Slots in bind order: src, dst, [bias], [residual], [weights when plain], [depthwise weights
  // when plain], [depthwise bias].
  const void* pointers[7];
  std::size_t n = 0;
  pointers[n++] = src;
  pointers[n++] = dst;
  if (bias) pointers[n++] = bias;
  if (epilogue.residual) pointers[n++] = epilogue.residual;
  if (!entry->weights.needs_reorder) pointers[n++] = weights;
  if (dw && !entry->depthwise_weights.needs_reorder) pointers[n++] = dw->weights;
  if (dw && !entry->depthwise_bias_owned) pointers[n++] = dw->bias;
  entry->exec.run(std::span<const void* const>(pointers, n));
}

void conv2d_forward_bf16(const ConvShape& s, const float* src, const float* weights,
                         std::uint64_t weights_version, const float* bias, float* dst,
                         const ConvEpilogue& epilogue) {
  s.validate();
  require_plain_bf16_layout(s, true);
  if (epilogue.depthwise) throw Error("conv2d " + describe(s) + ": no fused depthwise stage in bf16");
  static PrimitiveCache<Bf16ForwardEntry> cache;
  PrimitiveKey key = conv_key(PrimitiveKind::conv_forward_bf16, s);
  add_weights_identity(key, weights, weights_version);
  key.add(bias != nullptr).add(static_cast<int>(epilogue.activation)).add(epilogue.residual != nullptr);
  key.add(float_bits(epilogue.clip_min)).add(float_bits(epilogue.clip_max));
  const auto entry =
      with_context([&] { return "conv2d " + describe(s) + " in bf16"; },
                   [&] {
                     return cache.get(key, [&] {
                       const Geometry g = geometry(s);
                       dnnl::primitive_attr attr;
                       // The residual is added and the activation applied in f32, on the f32 sums.
                       attr.set_post_ops(forward_post_ops(g, epilogue));
                       const auto pd = bf16_forward_pd(s, g, bias != nullptr, attr);
                       auto e = std::make_shared<Bf16ForwardEntry>();
                       e->exec.set_primitive(dnnl::convolution_forward(pd));
                       e->src.init(e->exec, DNNL_ARG_SRC, g.src, bf16_desc(g.src, activation_tag(s.layout)));
                       e->exec.bind(DNNL_ARG_DST, g.dst);
                       if (bias) e->exec.bind(DNNL_ARG_BIAS, g.bias);
                       if (epilogue.residual)
                         e->exec.bind(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, g.dst);
                       // f32 OIHW -> bf16 blocked: always a reorder
                       e->weights.init(g.weights_plain, pd.weights_desc());
                       e->weights.bind(e->exec, g.weights_plain);
                       return e;
                     });
                   });
  std::lock_guard<std::mutex> lock(entry->mutex);
  entry->weights.refresh(weights, weights_version);
  entry->src.run(src);
  // Slots in bind order: dst, [bias], [residual].
  const void* pointers[3];
  std::size_t n = 0;
  pointers[n++] = dst;
  if (bias) pointers[n++] = bias;
  if (epilogue.residual) pointers[n++] = epilogue.residual;
  entry->exec.run(std::span<const void* const>(pointers, n));
}

void conv2d_backward_data_bf16(const ConvShape& s, const float* diff_dst, const float* weights,
                               std::uint64_t weights_version, float* diff_src) {
  s.validate();
  require_plain_bf16_layout(s);
  static PrimitiveCache<Bf16BackwardDataEntry> cache;
  PrimitiveKey key = conv_key(PrimitiveKind::conv_backward_data_bf16, s);
  add_weights_identity(key, weights, weights_version);
  const auto entry = with_context(
      [&] { return "conv2d " + describe(s) + " backward data in bf16"; },
      [&] {
        return cache.get(key, [&] {
          const Geometry g = geometry(s);
          const auto hint = bf16_forward_pd(s, g, false, dnnl::primitive_attr());
          const dnnl::convolution_backward_data::desc desc(
              dnnl::algorithm::convolution_direct, g.src, bf16_desc(g.weights_any, tag::any),
              bf16_desc(g.dst, activation_tag(s.layout)), g.strides, g.dilates, g.pad_l, g.pad_r);
          const dnnl::convolution_backward_data::primitive_desc pd(desc, engine(), hint);
          auto e = std::make_shared<Bf16BackwardDataEntry>();
          e->exec.set_primitive(dnnl::convolution_backward_data(pd));
          e->diff_dst.init(e->exec, DNNL_ARG_DIFF_DST, g.dst, bf16_desc(g.dst, activation_tag(s.layout)));
          e->exec.bind(DNNL_ARG_DIFF_SRC, g.src);
          e->weights.init(g.weights_plain, pd.weights_desc());
          e->weights.bind(e->exec, g.weights_plain);
          return e;
        });
      });
  std::lock_guard<std::mutex> lock(entry->mutex);
  entry->weights.refresh(weights, weights_version);
  entry->diff_dst.run(diff_dst);
  entry->exec.run({diff_src});
}

void conv2d_backward_weights_bf16(const ConvShape& s, const float* src, const float* diff_dst,
                                  float* diff_weights, float* diff_bias) {
  s.validate();
  require_plain_bf16_layout(s);
  static PrimitiveCache<Bf16BackwardWeightsEntry> cache;
  PrimitiveKey key = conv_key(PrimitiveKind::conv_backward_weights_bf16, s);
  key.add(diff_bias != nullptr);
  const auto entry =
      with_context([&] { return "conv2d " + describe(s) + " backward weights in bf16"; },
                   [&] {
                     return cache.get(key, [&] {
                       const Geometry g = geometry(s);
                       const tag layout = activation_tag(s.layout);
                       const auto hint = bf16_forward_pd(s, g, diff_bias != nullptr, dnnl::primitive_attr());
                       const auto src_md = bf16_desc(g.src, layout), dst_md = bf16_desc(g.dst, layout);
                       // Weight (and bias) gradients accumulate and are written in f32.
                       const dnnl::convolution_backward_weights::primitive_desc pd(
                           backward_weights_desc(g, src_md, dst_md, diff_bias != nullptr), engine(), hint);
                       auto e = std::make_shared<Bf16BackwardWeightsEntry>();
                       e->exec.set_primitive(dnnl::convolution_backward_weights(pd));
                       e->src.init(e->exec, DNNL_ARG_SRC, g.src, src_md);
                       e->diff_dst.init(e->exec, DNNL_ARG_DIFF_DST, g.dst, dst_md);
                       if (diff_bias) e->exec.bind(DNNL_ARG_DIFF_BIAS, g.bias);
                       e->diff_weights.init(e->exec, pd.diff_weights_desc(), g.weights_plain);
                       return e;
                     });
                   });
  std::lock_guard<std::mutex> lock(entry->mutex);
  entry->src.run(src);
  entry->diff_dst.run(diff_dst);
  run_backward_weights(*entry, {}, diff_weights, diff_bias);
}

void conv2d_backward_data(const ConvShape& s, const float* diff_dst, const float* weights,
                          std::uint64_t weights_version, float* diff_src) {
  s.validate();
  static PrimitiveCache<BackwardDataEntry> cache;
  const auto entry =
      with_context([&] { return "conv2d " + describe(s) + " backward data"; },
                   [&] {
                     PrimitiveKey key = conv_key(PrimitiveKind::conv_backward_data, s);
                     add_weights_identity(key, weights, weights_version);
                     return cache.get(key, [&] {
                       const Geometry g = geometry(s);
                       const auto hint = forward_pd(g, false, dnnl::primitive_attr());
                       const dnnl::convolution_backward_data::desc desc(
                           dnnl::algorithm::convolution_direct, g.src, g.weights_any, g.dst, g.strides,
                           g.dilates, g.pad_l, g.pad_r);
                       const dnnl::convolution_backward_data::primitive_desc pd(desc, engine(), hint);
                       auto e = std::make_shared<BackwardDataEntry>();
                       e->exec.set_primitive(dnnl::convolution_backward_data(pd));
                       e->weights.init(g.weights_plain, pd.weights_desc());
                       e->exec.bind(DNNL_ARG_DIFF_DST, g.dst);
                       e->exec.bind(DNNL_ARG_DIFF_SRC, g.src);
                       e->weights.bind(e->exec, g.weights_plain);
                       return e;
                     });
                   });
  entry->weights.refresh(weights, weights_version);
  if (entry->weights.needs_reorder)
    entry->exec.run({diff_dst, diff_src});
  else
    entry->exec.run({diff_dst, diff_src, weights});
}

void conv2d_backward_weights(const ConvShape& s, const float* src, const float* diff_dst, float* diff_weights,
                             float* diff_bias) {
  s.validate();
  static PrimitiveCache<BackwardWeightsEntry> cache;
  PrimitiveKey key = conv_key(PrimitiveKind::conv_backward_weights, s);
  key.add(diff_bias != nullptr);
  const auto entry =
      with_context([&] { return "conv2d " + describe(s) + " backward weights"; },
                   [&] {
                     return cache.get(key, [&] {
                       const Geometry g = geometry(s);
                       const auto hint = forward_pd(g, diff_bias != nullptr, dnnl::primitive_attr());
                       const dnnl::convolution_backward_weights::primitive_desc pd(
                           backward_weights_desc(g, g.src, g.dst, diff_bias != nullptr), engine(), hint);
                       auto e = std::make_shared<BackwardWeightsEntry>();
                       e->exec.set_primitive(dnnl::convolution_backward_weights(pd));
                       e->exec.bind(DNNL_ARG_SRC, g.src);
                       e->exec.bind(DNNL_ARG_DIFF_DST, g.dst);
                       if (diff_bias) e->exec.bind(DNNL_ARG_DIFF_BIAS, g.bias);
                       e->diff_weights.init(e->exec, pd.diff_weights_desc(), g.weights_plain);
                       return e;
                     });
                   });
  run_backward_weights(*entry, {src, diff_dst}, diff_weights, diff_bias);
}

}  // namespace cpudl::onednn
