// Batch normalisation through oneDNN: training (batch statistics), inference (given statistics),
// each optionally fused with the ReLU that follows, and backward (data, scale and shift
// gradients in one pass, through the fused ReLU's mask when there is one).
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "dense/onednn/dense.h"
#include "dense/onednn/executable.h"
#include "dense/onednn/primitive_cache.h"

namespace cpudl::onednn {
namespace {

using tag = dnnl::memory::format_tag;
using flags = dnnl::normalization_flags;

std::string bn_text(const BatchNormShape& s) {
  return "batch_norm [" + std::to_string(s.batch) + "x" + std::to_string(s.channels) + "x" +
         std::to_string(s.height) + "x" + std::to_string(s.width) + "]";
}

void validate(const BatchNormShape& s) {
  if (s.batch < 1 || s.channels < 1 || s.height < 1 || s.width < 1)
    throw Error(bn_text(s) + ": every size must be at least 1");
  if (!(s.epsilon > 0)) throw Error(bn_text(s) + ": epsilon must be positive");
}

PrimitiveKey bn_key(PrimitiveKind op, const BatchNormShape& s, std::int64_t extra = 0) {
  PrimitiveKey key(op);
  std::int32_t eps_bits;
  static_assert(sizeof eps_bits == sizeof s.epsilon);
  std::memcpy(&eps_bits, &s.epsilon, sizeof eps_bits);
  key.add(s.batch)
      .add(s.channels)
      .add(s.height)
      .add(s.width)
      .add(static_cast<int>(s.layout))
      .add(eps_bits)
      .add(extra);
  return key;
}

dnnl::memory::desc data_md(const BatchNormShape& s) {
  return plain_desc({s.batch, s.channels, s.height, s.width}, activation_tag(s.layout));
}

dnnl::memory::desc channel_md(const BatchNormShape& s) { return plain_desc({s.channels}, tag::x); }

// relu: fuse_norm_relu, whose forward writes the ReLU's mask to a workspace the backward reads.
dnnl::batch_normalization_forward::primitive_desc training_pd(const BatchNormShape& s, bool relu) {
  auto f = flags::use_scale | flags::use_shift;
  if (relu) f = f | flags::fuse_norm_relu;
  const dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_training, data_md(s), s.epsilon,
                                                     f);
  return dnnl::batch_normalization_forward::primitive_desc(desc, engine());
}

struct BnEntry {
  Executable exec;
  std::size_t workspace_bytes = 0;  // the fused ReLU's mask (training with relu)
};

// The forward arguments of both passes, in the order run() takes them: src, scale, shift, dst,
// mean, variance (training writes the statistics, inference reads them).
void bind_forward_args(Executable& exec, const BatchNormShape& s) {
  exec.bind(DNNL_ARG_SRC, data_md(s));
  exec.bind(DNNL_ARG_SCALE, channel_md(s));
  exec.bind(DNNL_ARG_SHIFT, channel_md(s));
  exec.bind(DNNL_ARG_DST, data_md(s));
  exec.bind(DNNL_ARG_MEAN, channel_md(s));
  exec.bind(DNNL_ARG_VARIANCE, channel_md(s));
}

// The training forward primitive of shape s, fused with the ReLU or not: created once, cached.
std::shared_ptr<BnEntry> training_entry(const BatchNormShape& s, bool relu) {
  validate(s);
  static PrimitiveCache<BnEntry> cache;
  auto create = [&] {
    const auto pd = training_pd(s, relu);
    auto e = std::make_shared<BnEntry>();
    e->exec.set_primitive(dnnl::batch_normalization_forward(pd));
    bind_forward_args(e->exec, s);
    if (relu) {
      e->exec.bind(DNNL_ARG_WORKSPACE, pd.workspace_desc());
      e->workspace_bytes = pd.workspace_desc().get_size();
    }
    return e;
  };
  return with_context([&] { return bn_text(s); },
                      [&] { return cache.get(bn_key(PrimitiveKind::bn_training, s, relu), create); });
}

}  // namespace

// From the cached primitive: a training step asks once per fused layer, and creating a primitive
// descriptor just to read the size cost more than the lookup.
std::size_t batch_norm_relu_workspace_bytes(const BatchNormShape& s) {
  return training_entry(s, true)->workspace_bytes;
}

void batch_norm_forward_training(const BatchNormShape& s, const float* src, const float* scale,
                                 const float* shift, float* dst, float* mean, float* variance,
                                 void* relu_workspace) {
  const bool relu = relu_workspace != nullptr;
  const auto entry = training_entry(s, relu);
  const void* args[] = {src, scale, shift, dst, mean, variance, relu_workspace};  // the workspace last
  entry->exec.run(std::span(args, relu ? 7 : 6));
}

void batch_norm_forward_inference(const BatchNormShape& s, const float* src, const float* scale,
                                  const float* shift, const float* mean, const float* variance, float* dst,
                                  Activation activation) {
  validate(s);
  static PrimitiveCache<BnEntry> cache;
  const bool relu = activation == Activation::relu;
  const auto entry =
      with_context([&] { return bn_text(s) + " inference"; },
                   [&] {
                     return cache.get(bn_key(PrimitiveKind::bn_inference, s, relu), [&] {
                       auto f = flags::use_scale | flags::use_shift | flags::use_global_stats;
                       if (relu) f = f | flags::fuse_norm_relu;
                       const dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference,
                                                                          data_md(s), s.epsilon, f);
                       const dnnl::batch_normalization_forward::primitive_desc pd(desc, engine());
                       auto e = std::make_shared<BnEntry>();
                       e->exec.set_primitive(dnnl::batch_normalization_forward(pd));
                       bind_forward_args(e->exec, s);
                       return e;
                     });
                   });
  entry->exec.run({src, scale, shift, dst, mean, variance});
}

void batch_norm_backward(const BatchNormShape& s, const float* src, const float* diff_dst, const float* scale,
                         const float* shift, const float* mean, const float* variance, float* diff_src,
                         float* diff_scale, float* diff_shift, const void* relu_workspace) {
  validate(s);
  static PrimitiveCache<BnEntry> cache;
  const bool relu = relu_workspace != nullptr;
  const auto entry = with_context([&] { return bn_text(s) + " backward"; },
                                  [&] {
                                    return cache.get(bn_key(PrimitiveKind::bn_backward, s, relu), [&] {
                                      auto f = flags::use_scale | flags::use_shift;
                                      if (relu) f = f | flags::fuse_norm_relu;
                                      const dnnl::batch_normalization_backward::desc desc(
                                          dnnl::prop_kind::backward, data_md(s), data_md(s), s.epsilon, f);
                                      const dnnl::batch_normalization_backward::primitive_desc pd(
                                          desc, engine(), training_pd(s, relu));
                                      auto e = std::make_shared<BnEntry>();
                                      e->exec.set_primitive(dnnl::batch_normalization_backward(pd));
                                      e->exec.bind(DNNL_ARG_SRC, data_md(s));
                                      e->exec.bind(DNNL_ARG_DIFF_DST, data_md(s));
                                      e->exec.bind(DNNL_ARG_SCALE, channel_md(s));
                                      e->exec.bind(DNNL_ARG_SHIFT, channel_md(s));
                                      e->exec.bind(DNNL_ARG_MEAN, channel_md(s));
                                      e->exec.bind(DNNL_ARG_VARIANCE, channel_md(s));
                                      e->exec.bind(DNNL_ARG_DIFF_SRC, data_md(s));
                                      e->exec.bind(DNNL_ARG_DIFF_SCALE, channel_md(s));
                                      e->exec.bind(DNNL_ARG_DIFF_SHIFT, channel_md(s));
                                      if (relu) e->exec.bind(DNNL_ARG_WORKSPACE, pd.workspace_desc());
                                      return e;
                                    });
                                  });
  const void* args[] = {src,      diff_dst, scale,      shift,      mean,
                        variance, diff_src, diff_scale, diff_shift, relu_workspace};  // the workspace last
  entry->exec.run(std::span(args, relu ? 10 : 9));
}

}  // namespace cpudl::onednn
