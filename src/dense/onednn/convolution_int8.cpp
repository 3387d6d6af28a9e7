// Int8 convolution through oneDNN (dense.h: Int8Convolution). One primitive per layer, made when
// an inference plan is built and run for every inference: its weights reordered once into the
// kernel's blocked layout, the QDQ scales folded into oneDNN's per-channel output scales.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpudl/runtime.h"
#include "dense/onednn/conv_geometry.h"
#include "dense/onednn/dense.h"
#include "dense/onednn/executable.h"
#include "runtime/parallel.h"

namespace cpudl::onednn {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Int8Convolution::State {
  Executable exec;
  Executable quantize;  // f32 sources: the reorder into `staged`
  dnnl::memory weights, bias, staged;
  std::string implementation;
  bool residual = false, f32_source = false;
  std::size_t dst_bytes = 0;
};

namespace {

void validate(const Int8ConvSpec& spec) {
  const ConvShape& s = spec.shape;
  s.validate();
  const auto fail = [&](const std::string& what) { throw Error("int8 conv2d " + describe(s) + ": " + what); };
  if (!dense::plain_planes(s.layout) || !dense::plain_planes(s.dst_layout.value_or(s.layout)))
    fail("takes NCHW or NHWC activations in and out");
  if (!(spec.src_scale > 0.0f) || spec.src_zero < 0 || spec.src_zero > 255)
    fail("bad source scale or zero point");
  const auto scales = static_cast<std::int64_t>(spec.weight_scales.size());
  if (scales != 1 && scales != s.out_channels) fail("needs 1 or out_channels weight scales");
  for (float w : spec.weight_scales)
    if (!(w > 0.0f) || !std::isfinite(w)) fail("weight scales must be positive");
  if (spec.u8_output && (!(spec.dst_scale > 0.0f) || spec.dst_zero < 0 || spec.dst_zero > 255))
    fail("bad output scale or zero point");
  if (spec.u8_output && spec.residual &&
      (!(spec.residual_scale > 0.0f) || spec.residual_zero < 0 || spec.residual_zero > 255))
    fail("bad residual scale or zero point");
}

}  // namespace

Int8Convolution::Int8Convolution(const Int8ConvSpec& spec, const std::int8_t* weights, const float* bias)
    : state_(std::make_unique<State>()) {
  validate(spec);
  const ConvShape& s = spec.shape;
  const Geometry g = geometry(s);
  // An f32 source is quantised into NHWC: oneDNN's int8 convolutions read NCHW bytes only in
  // their reference kernel (ResNet's 3-channel first layer at batch 16: 25 s against 6 ms).
  const tag src_tag = spec.f32_source ? tag::nhwc : activation_tag(s.layout);
  const tag dst_tag = activation_tag(s.dst_layout.value_or(s.layout));
  const auto src = retyped(g.src, dt::u8, src_tag);
  const auto dst = retyped(g.dst, spec.u8_output ? dt::u8 : dt::f32, dst_tag);
  const auto weights_any = retyped(g.weights_any, dt::s8, tag::any);
  const auto weights_plain = retyped(g.weights_plain, dt::s8, s.groups == 1 ? tag::oihw : tag::goihw);

  // oneDNN 2.x computes dst = output_scale[oc] * (int32 sum + bias[oc]), then the post-ops, then
  // rounds (to nearest even) and saturates into dst's type. The real value is
  // src_scale * weight_scale[oc] * sum + bias: so the output scale is their product (over the
  // next layer's scale for a u8 output), and the bias is divided by the same product.
  const std::int64_t oc = s.out_channels;
  std::vector<float> product(static_cast<std::size_t>(oc)), output_scales(product.size());
  for (std::int64_t o = 0; o < oc; ++o) {
    const float w = spec.weight_scales.size() == 1 ? spec.weight_scales[0]
                                                   : spec.weight_scales[static_cast<std::size_t>(o)];
    product[static_cast<std::size_t>(o)] = spec.src_scale * w;
    output_scales[static_cast<std::size_t>(o)] =
        spec.u8_output ? spec.src_scale * w / spec.dst_scale : spec.src_scale * w;
  }
  dnnl::primitive_attr attr;
  attr.set_output_scales(1 << 1, output_scales);
  // A source zero point other than 0 moves oneDNN to its slower direct kernel (measured: 4x on
  // ResNet's 3x3 layers with AMX); activations after a ReLU have 0, so only the first layer pays.
  if (spec.src_zero != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {spec.src_zero});
  dnnl::post_ops ops;
  // The residual as oneDNN's sum post-op (dst += ...): its binary add post-op sends the AMX
  // convolutions to a direct kernel 7x slower (ResNet-18's 3x3 128-channel layer, batch 16).
  // A uint8 residual enters in the output's units: (r - zero) * residual_scale / dst_scale.
  if (spec.residual && spec.u8_output)
    ops.append_sum(spec.residual_scale / spec.dst_scale, spec.residual_zero);
  else if (spec.residual)
    ops.append_sum(1.0f);
  // In a u8 output's units the activation's bounds divide by its scale, and the zero point is
  // added last (eltwise_linear), before oneDNN's rounding and saturation: QuantizeLinear exactly.
  const float unit = spec.u8_output ? spec.dst_scale : 1.0f;
  // SiLU is not scale-invariant: in units of `unit`, SiLU(y) / unit = t * sigmoid(unit * t) for
  // t = y / unit, which is oneDNN's swish with alpha = unit.
  if (spec.activation == Activation::swish)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, unit, 0.0f);
  else
    append_activation(ops, static_cast<int>(spec.activation), spec.clip_min / unit, spec.clip_max / unit);
  if (spec.u8_output && spec.dst_zero != 0)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, static_cast<float>(spec.dst_zero));
  attr.set_post_ops(ops);

  with_context([&] { return "int8 conv2d " + describe(s); },
               [&] {
                 const ThreadScope openmp(0);  // oneDNN sizes a primitive by OpenMP's count: make it ours
                 const auto bias_md = retyped(g.bias, dt::f32, tag::x);
                 const auto desc = dnnl::convolution_forward::desc(
                     dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                     weights_any, bias_md, dst, g.strides, g.dilates, g.pad_l, g.pad_r);
                 const dnnl::convolution_forward::primitive_desc pd(desc, attr, engine());
                 state_->implementation = pd.impl_info_str();
                 state_->exec.set_primitive(dnnl::convolution_forward(pd));
                 // Weights: the caller's OIHW, reordered once into what the kernel reads.
                 const dnnl::memory plain(weights_plain, engine(), const_cast<std::int8_t*>(weights));
                 state_->weights = dnnl::memory(pd.weights_desc(), engine());
                 reorder(plain, state_->weights);
                 state_->bias = dnnl::memory(bias_md, engine());
                 auto* b = static_cast<float*>(state_->bias.get_data_handle());
                 for (std::int64_t o = 0; o < oc; ++o)
                   b[o] = bias ? bias[o] / product[static_cast<std::size_t>(o)] : 0.0f;
                 if (spec.f32_source) {
                   // QuantizeLinear as one oneDNN reorder (layout change included): x / scale +
                   // zero, rounded to nearest even and saturated.
                   dnnl::primitive_attr q;
                   q.set_output_scales(0, {1.0f / spec.src_scale});
                   if (spec.src_zero != 0) q.set_zero_points(DNNL_ARG_DST, 0, {spec.src_zero});
                   const auto from = retyped(g.src, dt::f32, activation_tag(s.layout));
                   state_->staged = dnnl::memory(src, engine());
                   state_->quantize.set_primitive(
                       dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), src, q)));
                   state_->quantize.bind(DNNL_ARG_FROM, from);
                   state_->quantize.bind_owned(DNNL_ARG_TO, state_->staged);
                   state_->exec.bind_owned(DNNL_ARG_SRC, state_->staged);
                 } else {
                   state_->exec.bind(DNNL_ARG_SRC, src);
                 }
                 state_->exec.bind(DNNL_ARG_DST, dst);
                 state_->exec.bind_owned(DNNL_ARG_WEIGHTS, state_->weights);
                 state_->exec.bind_owned(DNNL_ARG_BIAS, state_->bias);
                 return 0;
               });
  state_->residual = spec.residual;
  state_->f32_source = spec.f32_source;
  state_->dst_bytes = static_cast<std::size_t>(s.batch * s.out_channels * s.out_height() * s.out_width()) *
                      (spec.u8_output ? 1 : sizeof(float));
}

Int8Convolution::~Int8Convolution() = default;

namespace {

// The sum post-op adds to what dst holds: the residual goes there first unless it is there.
void place_residual(const void* residual, void* dst, std::size_t bytes) {
  if (!residual || residual == dst) return;
  const auto* from = reinterpret_cast<const std::byte*>(residual);
  auto* to = static_cast<std::byte*>(dst);
  parallel_for(bytes, 1 << 18, [&](std::size_t b, std::size_t e) { std::memcpy(to + b, from + b, e - b); });
}

}  // namespace

void Int8Convolution::run(const std::uint8_t* src, void* dst, const void* residual) {
  if (state_->residual != (residual != nullptr) || state_->f32_source)
    throw Error("internal: int8 conv2d run with arguments it was not planned for");
  place_residual(residual, dst, state_->dst_bytes);
  state_->exec.run({src, dst});
}

void Int8Convolution::run_f32(const float* src, void* dst, const void* residual) {
  if (state_->residual != (residual != nullptr) || !state_->f32_source)
    throw Error("internal: int8 conv2d run with arguments it was not planned for");
  place_residual(residual, dst, state_->dst_bytes);
  state_->quantize.run({src});
  state_->exec.run({dst});
}

const std::string& Int8Convolution::implementation() const { return state_->implementation; }

bool int8_convolution_exact(std::span<const std::int8_t> weights) {
  if (runtime().isa.active >= IsaLevel::avx512_vnni) return true;
  return std::all_of(weights.begin(), weights.end(), [](std::int8_t w) { return w >= -64 && w <= 64; });
}

}  // namespace cpudl::onednn
