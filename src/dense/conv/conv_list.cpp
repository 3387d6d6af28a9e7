// The convolution implementation list (conv_list.h): each entry's rules, and the walk.
#include "dense/conv/conv_list.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/conv/conv_as_linear.h"
#include "dense/conv/few_channel_weight_grad.h"
#include "dense/conv/implicit_gemm_weight_grad.h"
#include "dense/conv/planar_conv.h"
#include "dense/conv/pointwise_conv.h"
#include "dense/conv/reference_conv.h"
#include "dense/conv/tap_gemm_weight_grad.h"
#include "dense/conv/winograd_conv.h"
#include "dense/onednn/dense.h"

namespace cpudl::conv {

using dense::Activation;
using dense::ActivationLayout;
using dense::ConvShape;

namespace {

ActivationLayout output_layout(const ConvShape& s) { return s.dst_layout.value_or(s.layout); }
bool channels_last(const ConvShape& s) {
  return s.layout == ActivationLayout::nhwc && output_layout(s) == ActivationLayout::nhwc;
}
bool strided(const ConvShape& s) { return s.stride_h > 1 || s.stride_w > 1; }
// The forward epilogue is at most a ReLU (what the native GEMM paths fuse).
bool relu_at_most(const ConvShape&, ConvPass pass, const ConvContext& c) {
  return pass != ConvPass::forward ||
         (!c.residual && (c.activation == Activation::none || c.activation == Activation::relu));
}
bool always(const ConvShape&, ConvPass, const ConvContext&) { return true; }
bool never(const ConvShape&, ConvPass, const ConvContext&) { return false; }
using dense::plain_planes;

// ---- planar: first layers on NCHW planes (planar_conv.h)
bool planar_runs(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  if (!planar_shape(s) || !plain_planes(s.layout) || !plain_planes(output_layout(s))) return false;
  return pass == ConvPass::backward_weights || (!c.input_needs_grad && relu_at_most(s, pass, c));
}
bool planar_prefers(const ConvShape&, ConvPass, const ConvContext& c) { return !c.input_needs_grad; }
void planar_run(const ConvShape& s, ConvPass pass, const ConvArgs& a) {
  if (pass == ConvPass::forward)
    planar_forward(s, a.src, a.weights, a.bias, a.epilogue.activation == Activation::relu, a.dst);
  else
    planar_backward_weights(s, a.src, a.diff_dst, a.dst, a.diff_bias);
}

// ---- conv_as_linear: every window covers the whole map (conv_as_linear.h)
struct Expanded : ConvPrepared {
  ExpandedWeights e;
};
bool as_linear_runs(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  return channels_last(s) && conv_covers_whole_map(s) && relu_at_most(s, pass, c);
}
bool as_linear_bf16_runs(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  return onednn::bf16_compute_available() && as_linear_runs(s, pass, c);
}
bool prefers_f32(const ConvShape&, ConvPass, const ConvContext& c) { return !c.bf16; }
bool prefers_bf16(const ConvShape&, ConvPass, const ConvContext& c) { return c.bf16; }
std::shared_ptr<const ConvPrepared> as_linear_prepare(const ConvShape& s, ConvPass, const float* weights) {
  auto p = std::make_shared<Expanded>();
  expand_weights(s, weights, p->e);
  return p;
}
template <bool kBf16>
void as_linear_run(const ConvShape& s, ConvPass pass, const ConvArgs& a) {
  if (pass == ConvPass::backward_weights) {
    conv_as_linear_backward_weights(s, a.src, a.diff_dst, a.dst, a.diff_bias, kBf16);
    return;
  }
  const auto* kept = dynamic_cast<const Expanded*>(a.prepared);
  ExpandedWeights fresh;
  if (!kept) expand_weights(s, a.weights, fresh);
  const float* e = kept ? kept->e.data : fresh.data;
  if (pass == ConvPass::forward)
    conv_as_linear_forward(s, a.src, e, a.bias, a.epilogue.activation == Activation::relu, a.dst, kBf16);
  else
    conv_as_linear_backward_data(s, a.src, e, a.dst, kBf16);
}

// ---- winograd: stride-1 3x3 by F(4x4, 3x3) / F(2x2, 3x3) (winograd_conv.h)
struct Transformed : ConvPrepared {
  ConvPass pass;
  std::optional<WinogradConv> conv;
};
std::optional<WinogradConvShape> winograd_of(const ConvShape& s, ConvPass pass) {
  if (output_layout(s) != s.layout) return std::nullopt;
  if (pass == ConvPass::backward_data) return winograd_backward_data_shape(s);
  auto w = winograd_shape(s);
  if (w && pass == ConvPass::backward_weights) {
    if (s.layout != ActivationLayout::nhwc) return std::nullopt;
    w->tile = 4;  // the weight gradient is F(4x4, 3x3) only
  }
  return w;
}
bool winograd_runs(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  if (pass == ConvPass::forward && c.activation == Activation::swish)
    return false;  // it clamps, nothing else
  return winograd_of(s, pass).has_value();
}
// Inference (constant weights): the blocked layout's forward pass, the weights transformed once.
// Training: where enough output tiles repay transforming the weights on every call.
bool winograd_prefers(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  if (c.bf16) return false;
  if (s.layout == ActivationLayout::blocked) return c.constant_weights && pass == ConvPass::forward;
  return winograd_training_shape(
             s, pass == ConvPass::backward_data ? WinogradPass::backward_data : WinogradPass::forward)
      .has_value();
}
WinogradPass winograd_pass(ConvPass pass) {
  return pass == ConvPass::backward_data ? WinogradPass::backward_data : WinogradPass::forward;
}
std::shared_ptr<const ConvPrepared> winograd_prepare(const ConvShape& s, ConvPass pass,
                                                     const float* weights) {
  if (pass == ConvPass::backward_weights) return nullptr;
  auto p = std::make_shared<Transformed>();
  p->pass = pass;
  p->conv.emplace(*winograd_of(s, pass), weights, winograd_pass(pass));
  return p;
}
void winograd_run(const ConvShape& s, ConvPass pass, const ConvArgs& a) {
  const WinogradConvShape w = *winograd_of(s, pass);
  if (pass == ConvPass::backward_weights) {
    winograd_backward_weights(w, a.src, a.diff_dst, a.dst, a.diff_bias);
    return;
  }
  const dense::ConvEpilogue& e = a.epilogue;
  const float lo = e.activation == Activation::relu   ? 0.0f
                   : e.activation == Activation::clip ? e.clip_min
                                                      : -INFINITY;
  const float hi = e.activation == Activation::clip ? e.clip_max : INFINITY;
  const auto* kept = dynamic_cast<const Transformed*>(a.prepared);
  if (kept && kept->pass == pass) {
    kept->conv->forward(a.src, a.bias, e.residual, lo, hi, a.dst);
  } else if (e.residual) {
    const WinogradConv conv(w, a.weights, winograd_pass(pass));
    conv.forward(a.src, a.bias, e.residual, lo, hi, a.dst);
  } else {
    winograd_convolve(w, a.weights, winograd_pass(pass), a.src, a.bias, lo, hi, a.dst);
  }
}

// ---- pointwise: 1x1 GEMMs over channels-last pixels (pointwise_conv.h)
bool pointwise_runs(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  if (!channels_last(s)) return false;
  if (pass == ConvPass::forward)
    return c.activation == Activation::none && !c.residual && pointwise_conv_forward_applies(s);
  return pass == ConvPass::backward_data && pointwise_conv_backward_data_applies(s);
}
bool pointwise_prefers(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  if (c.bf16) return false;
  return pass == ConvPass::forward ? pointwise_conv_forward_preferred(s)
                                   : pointwise_conv_backward_data_preferred(s);
}
void pointwise_run(const ConvShape& s, ConvPass pass, const ConvArgs& a) {
  if (pass == ConvPass::forward)
    pointwise_conv_forward(s, a.src, a.weights, a.bias, a.dst);
  else
    pointwise_conv_backward_data(s, a.src, a.weights, a.dst);
}

// ---- weight gradients: few-channel, tap-major GEMM, implicit GEMM
bool few_channel_runs(const ConvShape& s, ConvPass, const ConvContext&) {
  return channels_last(s) && few_channel_weight_grad_runs(s);
}
// Stride-1 layers with enough outputs: strided ones (ResNet's 7x7/2 stem) took 66-70 ms on this
// kernel against oneDNN's 31-33 (batch 16 at 224x224, 1 thread) and go to the tap-major GEMM;
// below kFewInputChannelsMinOutputs outputs the kernel does one FMA per pixel and tap.
bool few_channel_prefers(const ConvShape& s, ConvPass, const ConvContext&) {
  return s.out_channels >= kFewInputChannelsMinOutputs && !strided(s);
}
void few_channel_run(const ConvShape& s, ConvPass, const ConvArgs& a) {
  few_channel_weight_grad(s, a.src, a.diff_dst, a.dst, a.diff_bias);
}
bool tap_gemm_runs(const ConvShape& s, ConvPass, const ConvContext&) {
  return channels_last(s) && tap_gemm_weight_grad_applies(s);
}
bool tap_gemm_prefers(const ConvShape& s, ConvPass, const ConvContext&) {
  return tap_gemm_weight_grad_preferred(s);
}
void tap_gemm_run(const ConvShape& s, ConvPass, const ConvArgs& a) {
  tap_gemm_weight_grad(s, a.src, a.diff_dst, a.dst, a.diff_bias);
}
bool implicit_gemm_runs(const ConvShape& s, ConvPass, const ConvContext&) {
  return channels_last(s) && implicit_gemm_weight_grad_applies(s);
}
bool implicit_gemm_prefers(const ConvShape& s, ConvPass, const ConvContext&) {
  return implicit_gemm_weight_grad_preferred(s);
}
void implicit_gemm_run(const ConvShape& s, ConvPass, const ConvArgs& a) {
  implicit_gemm_weight_grad(s, a.src, a.diff_dst, a.dst, a.diff_bias);
}

// ---- oneDNN's primitives (onednn/dense.h)
// The bf16 forward fuses what oneDNN's f32 one does (residual add, any activation) on the f32 sums.
bool onednn_bf16_runs(const ConvShape& s, ConvPass pass, const ConvContext&) {
  return onednn::bf16_compute_available() && plain_planes(s.layout) && plain_planes(output_layout(s)) &&
         (pass == ConvPass::forward || output_layout(s) == s.layout);
}
// oneDNN's AMX weight gradient is slower than its f32 one for strided convolutions (ResNet-18 at
// 32x32, batch 64, 1 thread: 1x1/2 0.44-1.22 ms against 0.18-0.67, 3x3/2 1.5-2.8 ms against
// 1.2-1.9; but 3x3/1 2.7 ms against 6.3): those stay f32, only more exact.
bool onednn_bf16_prefers(const ConvShape& s, ConvPass pass, const ConvContext& c) {
  return c.bf16 && (pass != ConvPass::backward_weights || !strided(s));
}
void onednn_bf16_run(const ConvShape& s, ConvPass pass, const ConvArgs& a) {
  if (pass == ConvPass::forward)
    onednn::conv2d_forward_bf16(s, a.src, a.weights, a.weights_version, a.bias, a.dst, a.epilogue);
  else if (pass == ConvPass::backward_data)
    onednn::conv2d_backward_data_bf16(s, a.src, a.weights, a.weights_version, a.dst);
  else
    onednn::conv2d_backward_weights_bf16(s, a.src, a.diff_dst, a.dst, a.diff_bias);
}
void onednn_run(const ConvShape& s, ConvPass pass, const ConvArgs& a) {
  if (pass == ConvPass::forward)
    onednn::conv2d_forward(s, a.src, a.weights, a.weights_version, a.bias, a.dst, a.epilogue);
  else if (pass == ConvPass::backward_data)
    onednn::conv2d_backward_data(s, a.src, a.weights, a.weights_version, a.dst);
  else
    onednn::conv2d_backward_weights(s, a.src, a.diff_dst, a.dst, a.diff_bias);
}

// ---- reference (reference_conv.h)
void reference_run(const ConvShape& s, ConvPass pass, const ConvArgs& a) {
  if (pass == ConvPass::forward)
    reference_forward(s, a.src, a.weights, a.bias, a.epilogue, a.dst);
  else if (pass == ConvPass::backward_data)
    reference_backward_data(s, a.src, a.weights, a.dst);
  else
    reference_backward_weights(s, a.src, a.diff_dst, a.dst, a.diff_bias);
}

constexpr unsigned kForward = pass_bit(ConvPass::forward), kData = pass_bit(ConvPass::backward_data),
                   kWeights = pass_bit(ConvPass::backward_weights);

// Most specialised first. The measurements behind each prefers() rule are in docs/ARCHITECTURE.md.
const ConvImpl kImpls[] = {
    {"planar", kForward | kWeights, planar_runs, planar_prefers, planar_run},
    {"conv_as_linear", kAllPasses, as_linear_runs, prefers_f32, as_linear_run<false>, as_linear_prepare,
     true},
    {"conv_as_linear_bf16", kAllPasses, as_linear_bf16_runs, prefers_bf16, as_linear_run<true>,
     as_linear_prepare, true},
    {"winograd", kAllPasses, winograd_runs, winograd_prefers, winograd_run, winograd_prepare, false},
    {"pointwise", kForward | kData, pointwise_runs, pointwise_prefers, pointwise_run},
    {"few_channel", kWeights, few_channel_runs, few_channel_prefers, few_channel_run},
    {"tap_gemm", kWeights, tap_gemm_runs, tap_gemm_prefers, tap_gemm_run},
    {"implicit_gemm", kWeights, implicit_gemm_runs, implicit_gemm_prefers, implicit_gemm_run},
    {"onednn_bf16", kAllPasses, onednn_bf16_runs, onednn_bf16_prefers, onednn_bf16_run},
    {"onednn", kAllPasses, always, always, onednn_run},
    {"reference", kAllPasses, always, never, reference_run},
};

std::string names_of(const ConvShape* s, ConvPass pass, const ConvContext* c) {
  std::string out;
  for (const ConvImpl& impl : kImpls)
    if (!s || ((impl.passes & pass_bit(pass)) && impl.runs(*s, pass, *c)))
      out.append(out.empty() ? "" : ", ").append(impl.name);
  return out;
}

// CPUDL_CONV_IMPL, read once: null when unset; an unknown name is rethrown on every call.
const ConvImpl* forced_impl() {
  struct Forced {
    const ConvImpl* impl = nullptr;
    std::string error;
  };
  static const Forced forced = [] {
    Forced f;
    const char* value = std::getenv("CPUDL_CONV_IMPL");
    if (!value || !*value) return f;
    f.impl = find_conv_impl(value);
    if (!f.impl)
      f.error = "CPUDL_CONV_IMPL=" + std::string(value) + ": no such convolution implementation (" +
                names_of(nullptr, ConvPass::forward, nullptr) + ")";
    return f;
  }();
  if (!forced.error.empty()) throw UsageError(forced.error);
  return forced.impl;
}

void log_choice(const ConvShape& s, ConvPass pass, const ConvImpl& impl) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::string line = "conv " + dense::describe(s);
  line.append(" ").append(layout_name(s.layout));
  if (output_layout(s) != s.layout) line.append("->").append(layout_name(output_layout(s)));
  line.append(" ").append(pass_name(pass)).append(" -> ").append(impl.name);
  const std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(line).second) std::fprintf(stderr, "cpudl: %s\n", line.c_str());
}

}  // namespace

std::string_view pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::backward_data:
      return "backward_data";
    case ConvPass::backward_weights:
      return "backward_weights";
    case ConvPass::forward:
      break;
  }
  return "forward";
}

std::span<const ConvImpl> conv_impls() { return kImpls; }

const ConvImpl* find_conv_impl(std::string_view name) {
  for (const ConvImpl& impl : kImpls)
    if (impl.name == name) return &impl;
  return nullptr;
}

const ConvImpl& choose_conv_impl(const ConvShape& s, ConvPass pass, const ConvContext& context, bool log) {
  const ConvImpl* chosen = nullptr;
  const ConvImpl* forced = forced_impl();
  if (forced && (forced->passes & pass_bit(pass))) {
    if (!forced->runs(s, pass, context))
      throw UsageError("CPUDL_CONV_IMPL=" + std::string(forced->name) + " cannot run conv " +
                       dense::describe(s) + " " + std::string(layout_name(s.layout)) + " " +
                       std::string(pass_name(pass)) + "; these can: " + names_of(&s, pass, &context));
    chosen = forced;
  }
  for (const ConvImpl& impl : kImpls) {
    if (chosen) break;
    if ((impl.passes & pass_bit(pass)) && impl.runs(s, pass, context) && impl.prefers(s, pass, context))
      chosen = &impl;
  }
  if (log && verbose()) log_choice(s, pass, *chosen);
  return *chosen;
}

}  // namespace cpudl::conv
