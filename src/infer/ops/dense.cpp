// Dense operators: Conv (bias, residual Add and activation fused by the optimiser) and
// ConvTranspose (the backward-data pass of a convolution, which is exactly a transposed
// convolution) on the implementation list's choice (dense/conv/conv_list.h); pooling on the
// pooling list's (dense/pool/pool_list.h); Gemm and MatMul on oneDNN (dense/onednn/dense.h). Weights that are
// constants are reordered into oneDNN's blocked layout once per plan, never per run.
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>

#include "dense/conv/conv_list.h"
#include "dense/matmul/matmul_list.h"
#include "dense/matmul/weight_rows.h"
#include "dense/onednn/dense.h"
#include "dense/pool/pool_list.h"
#include "infer/op_list.h"
#include "infer/op_registry.h"
#include "infer/ops/window.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "runtime/parallel.h"

namespace cpudl::infer {

// Kernel, strides, pads and dilations of a 2-D Conv or pool, with auto_pad resolved for input
// size h x w. cpudl's oneDNN wrappers take symmetric padding (all PyTorch exports have it).
Window2d window_2d(const OpSetup& s, std::int64_t h, std::int64_t w, std::int64_t kh, std::int64_t kw) {
  Window2d win;
  const auto kernel = s.node.get_ints("kernel_shape", {kh, kw});
  if (kernel.size() != 2) s.fail("kernel_shape must have 2 entries (only 2-D is supported)");
  win.kh = kernel[0];
  win.kw = kernel[1];
  const auto strides = s.node.get_ints("strides", {1, 1});
  const auto dilations = s.node.get_ints("dilations", {1, 1});
  if (strides.size() != 2 || dilations.size() != 2) s.fail("strides and dilations must have 2 entries");
  win.sh = strides[0];
  win.sw = strides[1];
  win.dh = dilations[0];
  win.dw = dilations[1];
  if (win.kh < 1 || win.kw < 1 || win.sh < 1 || win.sw < 1 || win.dh < 1 || win.dw < 1)
    s.fail("kernel, strides and dilations must be at least 1");
  const std::string auto_pad = s.node.get_string("auto_pad", "NOTSET");
  std::vector<std::int64_t> pads = s.node.get_ints("pads", {0, 0, 0, 0});
  if (pads.size() != 4) s.fail("pads must have 4 entries");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const std::int64_t sizes[2] = {h, w}, k[2] = {win.kh, win.kw}, st[2] = {win.sh, win.sw},
                       d[2] = {win.dh, win.dw};
    for (int i = 0; i < 2; ++i) {
      const std::int64_t out = (sizes[i] + st[i] - 1) / st[i];
      const std::int64_t total =
          std::max<std::int64_t>(0, (out - 1) * st[i] + (k[i] - 1) * d[i] + 1 - sizes[i]);
      pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[i + 2] = total - pads[i];
    }
  } else if (auto_pad == "VALID") {
    pads = {0, 0, 0, 0};
  } else if (auto_pad != "NOTSET") {
    s.fail("auto_pad '" + auto_pad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
  if (pads[0] != pads[2] || pads[1] != pads[3])
    s.fail("asymmetric padding " + shape_text(pads) + " is not supported");
  if (pads[0] < 0 || pads[1] < 0) s.fail("negative padding");
  win.ph = pads[0];
  win.pw = pads[1];
  return win;
}

namespace {
void require_rank(const OpSetup& s, std::size_t i, std::size_t rank, const char* what) {
  if (s.shape(i).size() != rank)
    s.fail(std::string(what) + " has shape " + shape_text(s.shape(i)) + ", expected rank " +
           std::to_string(rank));
}

}  // namespace

onednn::ConvShape conv_shape(const OpSetup& s, std::size_t bias_input) {
  require_rank(s, 0, 4, "input X");
  require_rank(s, 1, 4, "weights W");
  const Shape& x = s.shape(0);
  const Shape& w = s.shape(1);
  onednn::ConvShape c;
  c.batch = x[0];
  c.in_channels = x[1];
  c.height = x[2];
  c.width = x[3];
  c.out_channels = w[0];
  c.groups = s.node.get_int("group", 1);
  if (c.groups < 1 || c.in_channels % c.groups != 0 || w[1] * c.groups != c.in_channels ||
      c.out_channels % c.groups != 0)
    s.fail("weights " + shape_text(w) + " do not fit input " + shape_text(x) + " with group " +
           std::to_string(c.groups));
  const Window2d win = window_2d(s, c.height, c.width, w[2], w[3]);
  if (win.kh != w[2] || win.kw != w[3])
    s.fail("kernel_shape disagrees with the weights' shape " + shape_text(w));
  c.kernel_h = win.kh, c.kernel_w = win.kw, c.stride_h = win.sh, c.stride_w = win.sw;
  c.pad_h = win.ph, c.pad_w = win.pw, c.dilation_h = win.dh, c.dilation_w = win.dw;
  if (c.out_height() < 1 || c.out_width() < 1)
    s.fail("the kernel does not fit the padded input " + shape_text(x));
  if (s.has(bias_input) && (s.shape(bias_input).size() != 1 || s.shape(bias_input)[0] != c.out_channels))
    s.fail("bias B has shape " + shape_text(s.shape(bias_input)) + ", expected [" +
           std::to_string(c.out_channels) + "]");
  c.layout = static_cast<onednn::ActivationLayout>(s.node.get_int("cpudl.src_layout", 0));
  if (s.node.has("cpudl.dst_layout"))
    c.dst_layout = static_cast<onednn::ActivationLayout>(s.node.get_int("cpudl.dst_layout", 0));
  return c;
}

FusedActivation fused_activation(const OpSetup& s, const std::string& prefix) {
  FusedActivation a;
  const std::string act = s.node.get_string(prefix + "activation", "");
  if (act == "Relu") a.kind = onednn::Activation::relu;
  if (act == "Silu") a.kind = onednn::Activation::swish;
  if (act == "Clip") {
    a.kind = onednn::Activation::clip;
    a.lo = s.node.get_float(prefix + "clip_min", -INFINITY);
    a.hi = s.node.get_float(prefix + "clip_max", INFINITY);
  }
  return a;
}

namespace {

// A version unique to each plan's constant weights: oneDNN's weight cache keys on (pointer,
// version), and a pointer freed by one plan may come back in the next.
std::uint64_t next_weights_version() {
  static std::atomic<std::uint64_t> counter{1};
  return counter.fetch_add(1);
}

// Per-channel bias for an NCHW tensor (ConvTranspose, whose oneDNN path has no bias).
void add_channel_bias(float* y, const float* bias, std::int64_t n, std::int64_t c, std::int64_t hw) {
  parallel_for(static_cast<std::size_t>(n * c),
               static_cast<std::size_t>(std::max<std::int64_t>(1, 16384 / hw)),
               [&](std::size_t b, std::size_t e) {
                 for (std::size_t i = b; i < e; ++i) {
                   const float v = bias[i % static_cast<std::size_t>(c)];
                   float* p = y + static_cast<std::int64_t>(i) * hw;
                   for (std::int64_t j = 0; j < hw; ++j) p[j] += v;
                 }
               });
}

Kernel build_conv(OpSetup& s) {
  s.require_inputs(2, 4);
  s.require_present_f32();
  const onednn::ConvShape c = conv_shape(s);
  const Shape out = {c.batch, c.out_channels, c.out_height(), c.out_width()};
  const bool residual = s.has(3);
  if (residual && s.shape(3) != out)
    s.fail("fused residual has shape " + shape_text(s.shape(3)) + ", expected " + shape_text(out));
  s.set_output(0, DType::f32, out);
  const FusedActivation act = fused_activation(s);
  const bool bias = s.has(2);
  // The implementation list (dense/conv/conv_list.h) picks the algorithm; one that transforms the
  // weights (Winograd) does it here, once per plan, when they are constants.
  conv::ConvContext context;
  context.constant_weights = s.constants[1] != nullptr;
  context.activation = act.kind;
  context.residual = residual;
  context.input_needs_grad = false;
  context.bf16 = s.node.get_int("cpudl.bf16", 0) != 0;  // optimizer.h's request_bf16
  const conv::ConvImpl& impl = conv::choose_conv_impl(c, conv::ConvPass::forward, context, !s.shape_pass);
  s.implementation = std::string(impl.name);
  std::shared_ptr<const conv::ConvPrepared> prepared;
  if (impl.prepare && s.constants[1])
    prepared = impl.prepare(c, conv::ConvPass::forward, s.constants[1]->data<float>());
  const std::uint64_t version = s.constants[1] ? next_weights_version() : 0;
  return [c, &impl, prepared, bias, residual, act, version](std::span<const TensorView> in,
                                                            std::span<const TensorView> o) {
    conv::ConvArgs a;
    a.src = in[0].f32(), a.weights = in[1].f32(), a.weights_version = version;
    a.bias = bias ? in[2].f32() : nullptr, a.dst = o[0].f32(), a.prepared = prepared.get();
    a.epilogue.activation = act.kind;
    a.epilogue.clip_min = act.lo;
    a.epilogue.clip_max = act.hi;
    a.epilogue.residual = residual ? in[3].f32() : nullptr;
    impl.run(c, conv::ConvPass::forward, a);
  };
}

// cpudl.ConvDepthwise (optimizer.h's fuse_depthwise): X, W (K x C x 1 x 1), B, depthwise W
// (K x 1 x 3 x 3), depthwise B; blocked activations in and out.
Kernel build_conv_depthwise(OpSetup& s) {
  s.require_inputs(4, 5);
  s.require_present_f32();
  require_rank(s, 0, 4, "input X");
  const Shape& x = s.shape(0);
  const Shape& w = s.shape(1);
  onednn::ConvShape c;
  c.batch = x[0], c.in_channels = x[1], c.height = x[2], c.width = x[3];
  c.out_channels = w.size() == 4 ? w[0] : 0;
  c.kernel_h = c.kernel_w = 1;
  c.layout = onednn::ActivationLayout::blocked;
  if (w != Shape{c.out_channels, c.in_channels, 1, 1})
    s.fail("weights W have shape " + shape_text(w) + ", expected [K, " + std::to_string(c.in_channels) +
           ", 1, 1]");
  const bool bias = s.has(2), dw_bias = s.has(4);
  if (bias && s.shape(2) != Shape{c.out_channels}) s.fail("bias B has shape " + shape_text(s.shape(2)));
  if (s.shape(3) != Shape{c.out_channels, 1, 3, 3})
    s.fail("depthwise weights have shape " + shape_text(s.shape(3)) + ", expected [" +
           std::to_string(c.out_channels) + ", 1, 3, 3]");
  if (dw_bias && s.shape(4) != Shape{c.out_channels})
    s.fail("depthwise bias has shape " + shape_text(s.shape(4)));
  onednn::DepthwiseStage stage;
  stage.stride = s.node.get_int("cpudl.dw_stride", 1);
  if (stage.stride != 1 && stage.stride != 2) s.fail("cpudl.dw_stride must be 1 or 2");
  const FusedActivation act = fused_activation(s), dw_act = fused_activation(s, "cpudl.dw_");
  stage.activation = dw_act.kind, stage.clip_min = dw_act.lo, stage.clip_max = dw_act.hi;
  s.set_output(0, DType::f32, {c.batch, c.out_channels, stage.out_size(c.height), stage.out_size(c.width)});
  const std::uint64_t version = s.constants[1] && s.constants[3] ? next_weights_version() : 0;
  return [c, stage, bias, dw_bias, act, version](std::span<const TensorView> in,
                                                 std::span<const TensorView> o) {
    onednn::DepthwiseStage dw = stage;
    dw.weights = in[3].f32();
    dw.bias = dw_bias ? in[4].f32() : nullptr;
    onednn::ConvEpilogue e;
    e.activation = act.kind;
    e.clip_min = act.lo;
    e.clip_max = act.hi;
    e.depthwise = &dw;
    onednn::conv2d_forward(c, in[0].f32(), in[1].f32(), version, bias ? in[2].f32() : nullptr, o[0].f32(), e);
  };
}

Kernel build_conv_transpose(OpSetup& s) {
  s.require_inputs(2, 3);
  s.require_present_f32();
  require_rank(s, 0, 4, "input X");
  require_rank(s, 1, 4, "weights W");
  const Shape& x = s.shape(0);
  const Shape& w = s.shape(1);
  const std::int64_t groups = s.node.get_int("group", 1);
  if (groups < 1 || w[0] != x[1] || x[1] % groups != 0)
    s.fail("weights " + shape_text(w) + " do not fit input " + shape_text(x) + " with group " +
           std::to_string(groups));
  if (s.node.has("output_shape")) s.fail("the output_shape attribute is not supported (give pads instead)");
  const Window2d win = window_2d(s, x[2], x[3], w[2], w[3]);
  const auto out_pad = s.node.get_ints("output_padding", {0, 0});
  if (out_pad.size() != 2 || out_pad[0] < 0 || out_pad[1] < 0 || out_pad[0] >= win.sh || out_pad[1] >= win.sw)
    s.fail("output_padding must have 2 entries, each smaller than its stride");
  // The transposed convolution is the backward-data pass of the convolution that maps the output
  // (C_out channels) back to the input (C_in channels), with the same weights.
  onednn::ConvShape c;
  c.batch = x[0];
  c.in_channels = w[1] * groups;
  c.out_channels = x[1];
  c.height = win.sh * (x[2] - 1) + out_pad[0] + (win.kh - 1) * win.dh + 1 - 2 * win.ph;
  c.width = win.sw * (x[3] - 1) + out_pad[1] + (win.kw - 1) * win.dw + 1 - 2 * win.pw;
  if (c.height < 1 || c.width < 1) s.fail("the output would be empty");
  c.kernel_h = win.kh, c.kernel_w = win.kw, c.stride_h = win.sh, c.stride_w = win.sw;
  c.pad_h = win.ph, c.pad_w = win.pw, c.dilation_h = win.dh, c.dilation_w = win.dw, c.groups = groups;
  const bool bias = s.has(2);
  if (bias && (s.shape(2).size() != 1 || s.shape(2)[0] != c.in_channels))
    s.fail("bias B has shape " + shape_text(s.shape(2)) + ", expected [" + std::to_string(c.in_channels) +
           "]");
  s.set_output(0, DType::f32, {c.batch, c.in_channels, c.height, c.width});
  conv::ConvContext context;
  context.constant_weights = s.constants[1] != nullptr;
  const conv::ConvImpl& impl =
      conv::choose_conv_impl(c, conv::ConvPass::backward_data, context, !s.shape_pass);
  s.implementation = std::string(impl.name);
  std::shared_ptr<const conv::ConvPrepared> prepared;
  if (impl.prepare && s.constants[1])
    prepared = impl.prepare(c, conv::ConvPass::backward_data, s.constants[1]->data<float>());
  const std::uint64_t version = s.constants[1] ? next_weights_version() : 0;
  return [c, &impl, prepared, bias, version](std::span<const TensorView> in, std::span<const TensorView> o) {
    conv::ConvArgs a;
    a.src = in[0].f32(), a.weights = in[1].f32(), a.weights_version = version, a.dst = o[0].f32();
    a.prepared = prepared.get();
    impl.run(c, conv::ConvPass::backward_data, a);
    if (bias) add_channel_bias(o[0].f32(), in[2].f32(), c.batch, c.in_channels, c.height * c.width);
  };
}

// The epilogue Gemm and MatMul hand the product: the fused bias row (or none) and activation.
onednn::MatmulEpilogue matmul_epilogue(const FusedActivation& act, const float* bias) {
  onednn::MatmulEpilogue e;
  e.bias = bias;
  e.activation = act.kind;
  e.clip_min = act.lo;
  e.clip_max = act.hi;
  return e;
}

// Gemm and MatMul in the precision the plan asked for (optimizer.h's request_bf16): f32 on the
// matmul list's choice, or bf16 on oneDNN, whose bf16 copy of a constant B is made once per plan.
// A product of one to eight rows of A with a constant B runs on the weight-row kernel
// (dense/matmul/weight_rows.h), which reads B as n rows of k: in bf16 over a bf16 copy of B made
// here (oneDNN's bf16 matmul was slower there than the f32 weight-row product), and in f32, when
// the file stores B k x n (PyTorch's export of a Linear layer on 3-D input: MatMul + Add), over a
// transposed copy made here -- the list's weight-row entry takes only B^T, and oneDNN's matmul on
// the k x n B took 2-2.6x its time (three 1024-wide layers on 4 rows, Zen 5 class).
struct LinearProduct {
  bool on = false;              // bf16
  std::uint64_t b_version = 0;  // 0: B changes between runs (rounded on every call)
  std::shared_ptr<const std::vector<std::uint16_t>> b_rows;
  std::shared_ptr<const std::vector<float>> b_rows_f32;
  void multiply(const onednn::MatmulShape& shape, const float* a, const float* b, float* c,
                const onednn::MatmulEpilogue& e) const {
    onednn::MatmulShape rows = shape;
    rows.transpose_b = true;
    if (b_rows)
      dense::weight_rows_bf16(rows, a, b_rows->data(), c, e);
    else if (b_rows_f32)
      dense::weight_rows_f32(rows, a, b_rows_f32->data(), c, e);
    else if (on)
      onednn::matmul_bf16(shape, a, b, c, e, b_version);
    else
      dense::matmul(shape, a, b, c, e);
  }
};
// `shape` is the product each run makes (batch 1 for every product that may take the rows).
LinearProduct linear_product(OpSetup& s, const onednn::MatmulShape& shape) {
  LinearProduct p;
  p.on = s.node.get_int("cpudl.bf16", 0) != 0;
  if (p.on && s.constants[1]) p.b_version = next_weights_version();
  onednn::MatmulShape rows = shape;
  rows.transpose_b = true;
  if (!s.constants[1] || s.constants[1]->dtype != DType::f32 ||
      s.constants[1]->numel() != shape.k * shape.n || !dense::weight_rows_fit(rows, {}))
    return p;
  const float* b = s.constants[1]->data<float>();
  if (p.on) {
    auto bf16 = std::make_shared<std::vector<std::uint16_t>>(static_cast<std::size_t>(shape.n * shape.k));
    for (std::int64_t j = 0; j < shape.n; ++j)
      for (std::int64_t i = 0; i < shape.k; ++i)
        (*bf16)[static_cast<std::size_t>(j * shape.k + i)] =
            f32_to_bf16(shape.transpose_b ? b[j * shape.k + i] : b[i * shape.n + j]);
    p.b_rows = std::move(bf16);
    s.implementation = "weight_rows_bf16";
  } else if (!shape.transpose_b) {
    auto t = std::make_shared<std::vector<float>>(static_cast<std::size_t>(shape.n * shape.k));
    kernels::kernel_table().f32_transpose.fn(
        b, static_cast<std::size_t>(shape.k), static_cast<std::size_t>(shape.n),
        static_cast<std::size_t>(shape.n), t->data(), static_cast<std::size_t>(shape.k));
    p.b_rows_f32 = std::move(t);
    s.implementation = "weight_rows (B transposed at plan time)";
  }
  return p;
}

Kernel build_gemm(OpSetup& s) {
  s.require_inputs(2, 3);
  s.require_present_f32();
  require_rank(s, 0, 2, "A");
  require_rank(s, 1, 2, "B");
  const bool ta = s.node.get_int("transA", 0) != 0, tb = s.node.get_int("transB", 0) != 0;
  const float alpha = s.node.get_float("alpha", 1.0f), beta = s.node.get_float("beta", 1.0f);
  const Shape& a = s.shape(0);
  const Shape& b = s.shape(1);
  onednn::MatmulShape m;
  m.m = ta ? a[1] : a[0];
  m.k = ta ? a[0] : a[1];
  m.n = tb ? b[0] : b[1];
  m.transpose_a = ta;
  m.transpose_b = tb;
  if ((tb ? b[1] : b[0]) != m.k)
    s.fail("A " + shape_text(a) + " and B " + shape_text(b) + " do not multiply (transA " +
           std::to_string(ta) + ", transB " + std::to_string(tb) + ")");
  const Shape out = {m.m, m.n};
  // The bias rides in oneDNN's epilogue when it is a row vector added once (beta 1, alpha 1);
  // any other C is added after the product.
  bool row_bias = false;
  std::shared_ptr<std::vector<std::int64_t>> c_offsets;
  if (s.has(2)) {
    const Shape& c = s.shape(2);
    const Shape bc = broadcast_shapes(s, out, c);
    if (bc != out) s.fail("C " + shape_text(c) + " does not broadcast to " + shape_text(out));
    row_bias = alpha == 1.0f && beta == 1.0f && shape_numel(c) == m.n && (c.size() == 1 || c[0] == 1);
    if (!row_bias) {
      c_offsets = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(m.m * m.n));
      const std::int64_t rows = c.size() == 2 ? c[0] : 1, cols = c.empty() ? 1 : c.back();
      for (std::int64_t i = 0; i < m.m; ++i)
        for (std::int64_t j = 0; j < m.n; ++j)
          (*c_offsets)[static_cast<std::size_t>(i * m.n + j)] =
              (rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j);
    }
  }
  s.set_output(0, DType::f32, out);
  const FusedActivation act = fused_activation(s);
  if (c_offsets && act.kind != onednn::Activation::none)
    s.fail("internal: activation fused over a general C");
  const LinearProduct product = linear_product(s, m);
  return [m, row_bias, c_offsets, alpha, beta, act, product](std::span<const TensorView> in,
                                                             std::span<const TensorView> o) {
    const onednn::MatmulEpilogue e = matmul_epilogue(act, row_bias ? in[2].f32() : nullptr);
    float* y = o[0].f32();
    product.multiply(m, in[0].f32(), in[1].f32(), y, e);
    if (c_offsets || alpha != 1.0f) {
      const float* c = c_offsets ? in[2].f32() : nullptr;
      const auto n = static_cast<std::size_t>(m.m * m.n);
      for (std::size_t i = 0; i < n; ++i) y[i] = alpha * y[i] + (c ? beta * c[(*c_offsets)[i]] : 0.0f);
    }
  };
}

Kernel build_matmul(OpSetup& s) {
  s.require_inputs(2, 3);
  s.require_f32(0);
  s.require_f32(1);
  Shape a = s.shape(0), b = s.shape(1);
  if (a.empty() || b.empty()) s.fail("MatMul inputs must have rank 1 or more");
  const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), 1);
  if (b_vector) b.push_back(1);
  const std::int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  if (b[b.size() - 2] != k)
    s.fail("A " + shape_text(s.shape(0)) + " and B " + shape_text(s.shape(1)) + " do not multiply");
  const Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  const Shape batch = broadcast_shapes(s, a_batch, b_batch);
  Shape out = batch;
  if (!a_vector) out.push_back(m);
  if (!b_vector) out.push_back(n);
  s.set_output(0, DType::f32, out);
  const bool bias = s.has(2);  // fused by the optimiser: a row vector of n added to every row
  if (bias && shape_numel(s.shape(2)) != n) s.fail("internal: fused bias of the wrong size");
  const FusedActivation act = fused_activation(s);
  onednn::MatmulShape shape;
  shape.n = n;
  shape.k = k;
  // B shared by every batch (weights): fold A's batch into its rows, one GEMM.
  const std::int64_t batches = shape_numel(batch);
  std::vector<std::int64_t> a_off, b_off;
  if (shape_numel(b_batch) == 1) {
    shape.m = m * shape_numel(a_batch);
    if (shape_numel(a_batch) != batches) s.fail("internal: batch broadcast");
  } else if (a_batch == b_batch) {
    shape.batch = batches;
    shape.m = m;
  } else {  // broadcast batches: one GEMM per output batch
    shape.m = m;
    const Shape shapes[2] = {a_batch, b_batch};
    std::vector<std::int64_t>* offsets[2] = {&a_off, &b_off};
    const std::int64_t sizes[2] = {m * k, k * n};
    for (int which = 0; which < 2; ++which) {
      Shape padded(batch.size() - shapes[which].size(), 1);
      padded.insert(padded.end(), shapes[which].begin(), shapes[which].end());
      for (std::int64_t i = 0; i < batches; ++i) {
        std::int64_t rest = i, off = 0, stride = 1;
        for (std::size_t d = batch.size(); d-- > 0;) {
          const std::int64_t idx = rest % batch[d];
          rest /= batch[d];
          if (padded[d] != 1) off += idx * stride;
          stride *= padded[d];
        }
        offsets[which]->push_back(off * sizes[which]);
      }
    }
  }
  const LinearProduct product = linear_product(s, a_off.empty() ? shape : onednn::MatmulShape{});
  return [shape, bias, act, a_off, b_off, m, n, product](std::span<const TensorView> in,
                                                         std::span<const TensorView> o) {
    const onednn::MatmulEpilogue e = matmul_epilogue(act, bias ? in[2].f32() : nullptr);
    if (a_off.empty()) {
      product.multiply(shape, in[0].f32(), in[1].f32(), o[0].f32(), e);
      return;
    }
    for (std::size_t i = 0; i < a_off.size(); ++i)
      product.multiply(shape, in[0].f32() + a_off[i], in[1].f32() + b_off[i],
                       o[0].f32() + static_cast<std::int64_t>(i) * m * n, e);
  };
}

Kernel build_pool(OpSetup& s, onednn::PoolKind kind) {
  s.require_inputs(1, 1);
  // uint8 values come from keep_activations_in_int8 (a quantised activation between int8
  // convolutions), for max pooling only.
  const bool bytes = kind == onednn::PoolKind::max && s.inputs[0].dtype == DType::u8;
  if (!bytes) s.require_f32(0);
  require_rank(s, 0, 4, "input X");
  if (s.node.get_int("storage_order", 0) != 0) s.fail("storage_order 1 is not supported");
  const Shape& x = s.shape(0);
  const auto kernel = s.node.get_ints("kernel_shape");
  if (kernel.size() != 2) s.fail("kernel_shape must have 2 entries (only 2-D pooling is supported)");
  const Window2d win = window_2d(s, x[2], x[3], kernel[0], kernel[1]);
  if (win.dh != 1 || win.dw != 1) s.fail("dilated pooling is not supported");
  onednn::PoolShape p;
  p.batch = x[0], p.channels = x[1], p.height = x[2], p.width = x[3];
  p.kernel_h = win.kh, p.kernel_w = win.kw, p.stride_h = win.sh, p.stride_w = win.sw, p.pad_h = win.ph,
  p.pad_w = win.pw;
  p.kind = kind;
  if (kind != onednn::PoolKind::max && s.node.get_int("count_include_pad", 0) != 0)
    p.kind = onednn::PoolKind::avg_include_padding;
  if (s.node.get_int("ceil_mode", 0) != 0) {
    // Ceil mode only differs when a window would start inside the padded input: reject that case.
    const std::int64_t ch = (p.height + 2 * p.pad_h - p.kernel_h + p.stride_h - 1) / p.stride_h + 1;
    const std::int64_t cw = (p.width + 2 * p.pad_w - p.kernel_w + p.stride_w - 1) / p.stride_w + 1;
    if (ch != p.out_height() || cw != p.out_width())
      s.fail("ceil_mode 1 with a partial last window is not supported");
  }
  if (p.out_height() < 1 || p.out_width() < 1)
    s.fail("the window does not fit the padded input " + shape_text(x));
  p.layout = static_cast<onednn::ActivationLayout>(s.node.get_int("cpudl.layout", 0));
  p.forward_only = true;
  s.set_output(0, bytes ? DType::u8 : DType::f32, {p.batch, p.channels, p.out_height(), p.out_width()});
  if (s.node.outputs.size() > 1 && !s.node.outputs[1].empty())
    s.fail("the Indices output of MaxPool is not supported");
  if (bytes) {
    const pool::U8PoolImpl& impl = pool::choose_u8_max_pool_impl(p, !s.shape_pass);
    s.implementation = std::string(impl.name);
    return [p, &impl](std::span<const TensorView> in, std::span<const TensorView> o) {
      impl.forward(p, static_cast<const std::uint8_t*>(in[0].data), static_cast<std::uint8_t*>(o[0].data));
    };
  }
  const pool::PoolImpl& impl = pool::choose_pool_impl(p, !s.shape_pass);
  s.implementation = std::string(impl.name);
  return [p, &impl](std::span<const TensorView> in, std::span<const TensorView> o) {
    impl.forward(p, in[0].f32(), o[0].f32(), nullptr);
  };
}

Kernel build_max_pool(OpSetup& s) { return build_pool(s, onednn::PoolKind::max); }
Kernel build_average_pool(OpSetup& s) { return build_pool(s, onednn::PoolKind::avg_exclude_padding); }

Kernel build_global_average_pool(OpSetup& s) {
  s.require_inputs(1, 1);
  s.require_f32(0);
  const Shape& x = s.shape(0);
  if (x.size() < 3) s.fail("input has shape " + shape_text(x) + ", expected N x C x spatial...");
  Shape out = {x[0], x[1]};
  std::int64_t spatial = 1;
  for (std::size_t i = 2; i < x.size(); ++i) {
    out.push_back(1);
    spatial *= x[i];
  }
  s.set_output(0, DType::f32, out);
  const std::int64_t layout = s.node.get_int("cpudl.layout", 0);
  if (layout == 2) {
    // Blocked: per image, C / b blocks of H x W x b floats; block j's lane k is channel j b + k.
    const std::int64_t n = x[0], c = x[1], b = onednn::blocked_layout_channels();
    return [n, c, b, spatial](std::span<const TensorView> in, std::span<const TensorView> o) {
      parallel_for(static_cast<std::size_t>(n * c / b), 1, [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          const float* src = in[0].f32() + static_cast<std::int64_t>(i) * spatial * b;
          float* dst = o[0].f32() + static_cast<std::int64_t>(i) * b;
          float sums[16] = {};
          for (std::int64_t p = 0; p < spatial; ++p)
            for (std::int64_t k = 0; k < b; ++k) sums[k] += src[p * b + k];
          for (std::int64_t k = 0; k < b; ++k) dst[k] = sums[k] / static_cast<float>(spatial);
        }
      });
    };
  }
  if (layout == 1) {
    // NHWC: each image's channels are contiguous at every position; sum rows of C.
    const std::int64_t n = x[0], c = x[1];
    return [n, c, spatial](std::span<const TensorView> in, std::span<const TensorView> o) {
      parallel_for(static_cast<std::size_t>(n), 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) {
          const float* src = in[0].f32() + static_cast<std::int64_t>(i) * spatial * c;
          float* dst = o[0].f32() + static_cast<std::int64_t>(i) * c;
          std::fill(dst, dst + c, 0.0f);
          for (std::int64_t p = 0; p < spatial; ++p)
            for (std::int64_t k = 0; k < c; ++k) dst[k] += src[p * c + k];
          for (std::int64_t k = 0; k < c; ++k) dst[k] /= static_cast<float>(spatial);
        }
      });
    };
  }
  const std::int64_t planes = x[0] * x[1];
  return [planes, spatial](std::span<const TensorView> in, std::span<const TensorView> o) {
    const float* src = in[0].f32();
    float* dst = o[0].f32();
    parallel_for(static_cast<std::size_t>(planes),
                 static_cast<std::size_t>(std::max<std::int64_t>(1, 16384 / spatial)),
                 [&](std::size_t b, std::size_t e) {
                   for (std::size_t i = b; i < e; ++i) {
                     const float* p = src + static_cast<std::int64_t>(i) * spatial;
                     float sum = 0.0f;
                     for (std::int64_t j = 0; j < spatial; ++j) sum += p[j];
                     dst[i] = sum / static_cast<float>(spatial);
                   }
                 });
  };
}

const OpEntry kOps[] = {
    {"Conv", build_conv},
    {"ConvTranspose", build_conv_transpose},
    {kConvDepthwiseOp, build_conv_depthwise},
    {"Gemm", build_gemm},
    {"MatMul", build_matmul},
    {"MaxPool", build_max_pool},
    {"AveragePool", build_average_pool},
    {"GlobalAveragePool", build_global_average_pool},
};

}  // namespace

std::span<const OpEntry> dense_ops() { return kOps; }

}  // namespace cpudl::infer
