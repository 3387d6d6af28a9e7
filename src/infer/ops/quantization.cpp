// Quantisation operators: QuantizeLinear and DequantizeLinear (per tensor or per axis; the QDQ
// format), DynamicQuantizeLinear and MatMulInteger (the operator format ONNX Runtime's
// quantize_dynamic and `cpudl quantize --mode dynamic` write), and cpudl.Int8MatMul, the
// optimiser's fusion of DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add), or of
// QuantizeLinear -> DequantizeLinear -> MatMul/Gemm with DequantizeLinear'd constant weights (the
// QDQ form), into one pass over the native int8 kernels (kernels/int8/int8.h). The unfused operators are
// plain loops that follow the ONNX definitions exactly; the fused one computes the same numbers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "dense/onednn/dense.h"
#include "infer/op_list.h"
#include "infer/op_registry.h"
#include "infer/ops/window.h"
#include "kernels/dispatch.h"
#include "kernels/int8/int8.h"
#include "runtime/parallel.h"

namespace cpudl::infer {
namespace {

const kernels::KernelTable& native() { return kernels::kernel_table(); }

// DynamicQuantizeLinear's scale and zero point for a tensor whose values span [lo, hi]: the range
// is widened to hold 0, mapped onto [0, 255], and the zero point rounded half to even.
using DynamicParams = kernels::U8QuantParams;

// Quantises x (n floats) with DynamicQuantizeLinear's rule into y; returns the parameters.
DynamicParams quantize_dynamic(const float* x, std::size_t n, std::uint8_t* y) {
  if (n == 0) return DynamicParams{};
  float lo = 0, hi = 0;
  native().f32_min_max.fn(x, n, &lo, &hi);
  const DynamicParams p = kernels::u8_quant_params(lo, hi);
  if (p.scale == 0.0f)
    std::memset(y, 0, n);
  else
    native().f32_quantize_u8.fn(x, n, p.scale, p.zero, y);
  return p;
}

// Per-axis quantisation parameters: a scalar, or one value per index of `axis`.
struct AxisParams {
  std::int64_t channels = 1, inner = 1;  // element i uses entry (i / inner) % channels
  std::size_t index(std::int64_t i) const { return static_cast<std::size_t>((i / inner) % channels); }
};
AxisParams axis_params(const OpSetup& s, std::size_t scale_input) {
  const Shape& x = s.shape(0);
  const ValueDesc& scale = s.inputs[scale_input];
  AxisParams p;
  if (scale.numel() == 1 && scale.shape.size() <= 1) return p;
  if (scale.shape.size() != 1)
    s.fail("the scale must be a scalar or 1-D, got shape " + shape_text(scale.shape));
  const std::int64_t axis =
      normalize_axis(s, s.node.get_int("axis", 1), static_cast<std::int64_t>(x.size()), "axis");
  if (x[static_cast<std::size_t>(axis)] != scale.shape[0])
    s.fail("the scale has " + std::to_string(scale.shape[0]) + " entries, the input's axis " +
           std::to_string(axis) + " has " + std::to_string(x[static_cast<std::size_t>(axis)]));
  p.channels = scale.shape[0];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < x.size(); ++d) p.inner *= x[d];
  return p;
}

void require_zero_point_like_scale(const OpSetup& s, std::size_t zp, std::size_t scale) {
  if (s.has(zp) && s.inputs[zp].numel() != s.inputs[scale].numel())
    s.fail("the zero point has " + std::to_string(s.inputs[zp].numel()) + " entries, the scale " +
           std::to_string(s.inputs[scale].numel()));
}

std::int32_t read_integer(DType t, const void* data, std::size_t i) {
  switch (t) {
    case DType::u8:
      return static_cast<const std::uint8_t*>(data)[i];
    case DType::i8:
      return static_cast<const std::int8_t*>(data)[i];
    case DType::i32:
      return static_cast<const std::int32_t*>(data)[i];
    default:
      return 0;
  }
}

Kernel build_quantize_linear(OpSetup& s) {
  s.require_inputs(2, 3);
  s.require_f32(0);
  s.require_f32(1);
  const DType t = s.has(2) ? s.inputs[2].dtype : DType::u8;
  if (t != DType::u8 && t != DType::i8) s.fail("the zero point must be UINT8 or INT8");
  require_zero_point_like_scale(s, 2, 1);
  const AxisParams p = axis_params(s, 1);
  const bool zp = s.has(2);
  s.set_output(0, t, s.shape(0));
  const float lo = t == DType::u8 ? 0.0f : -128.0f, hi = t == DType::u8 ? 255.0f : 127.0f;
  if (t == DType::u8 && p.channels == 1) {
    // The QDQ activations' case: one scale, uint8, on the vector kernel (same rounding and clamping).
    return [zp](std::span<const TensorView> in, std::span<const TensorView> o) {
      const auto n = static_cast<std::size_t>(shape_numel(*in[0].shape));
      const std::int32_t zero = zp ? *static_cast<const std::uint8_t*>(in[2].data) : 0;
      parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) {
        native().f32_quantize_u8.fn(in[0].f32() + b, e - b, *in[1].f32(), zero,
                                    static_cast<std::uint8_t*>(o[0].data) + b);
      });
    };
  }
  return [p, zp, t, lo, hi](std::span<const TensorView> in, std::span<const TensorView> o) {
    const std::int64_t n = shape_numel(*in[0].shape);
    const float* x = in[0].f32();
    const float* scale = in[1].f32();
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t c = p.index(i);
      const float zero = zp ? static_cast<float>(read_integer(t, in[2].data, c)) : 0.0f;
      float v = std::nearbyint(x[i] / scale[c]) + zero;
      v = v >= lo ? std::min(v, hi) : lo;  // also NaN -> lo
      if (t == DType::u8)
        static_cast<std::uint8_t*>(o[0].data)[i] = static_cast<std::uint8_t>(v);
      else
        static_cast<std::int8_t*>(o[0].data)[i] = static_cast<std::int8_t>(v);
    }
  };
}

Kernel build_dequantize_linear(OpSetup& s) {
  s.require_inputs(2, 3);
  const DType t = s.inputs[0].dtype;
  if (t != DType::u8 && t != DType::i8 && t != DType::i32) s.fail("input x must be UINT8, INT8 or INT32");
  s.require_f32(1);
  if (s.has(2) && s.inputs[2].dtype != t) s.fail("the zero point's type differs from x's");
  require_zero_point_like_scale(s, 2, 1);
  const AxisParams p = axis_params(s, 1);
  const bool zp = s.has(2);
  s.set_output(0, DType::f32, s.shape(0));
  if (t == DType::u8 && p.channels == 1) {
    // The QDQ activations' case: a loop the compiler vectorises, split over the threads.
    return [zp](std::span<const TensorView> in, std::span<const TensorView> o) {
      const auto n = static_cast<std::size_t>(shape_numel(*in[0].shape));
      const auto* x = static_cast<const std::uint8_t*>(in[0].data);
      const std::int32_t zero = zp ? *static_cast<const std::uint8_t*>(in[2].data) : 0;
      const float scale = *in[1].f32();
      float* y = o[0].f32();
      parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i)
          y[i] = static_cast<float>(static_cast<std::int32_t>(x[i]) - zero) * scale;
      });
    };
  }
  return [p, zp, t](std::span<const TensorView> in, std::span<const TensorView> o) {
    const std::int64_t n = shape_numel(*in[0].shape);
    const float* scale = in[1].f32();
    float* y = o[0].f32();
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t c = p.index(i);
      const std::int32_t zero = zp ? read_integer(t, in[2].data, c) : 0;
      y[i] = static_cast<float>(read_integer(t, in[0].data, static_cast<std::size_t>(i)) - zero) * scale[c];
    }
  };
}

Kernel build_dynamic_quantize_linear(OpSetup& s) {
  s.require_inputs(1, 1);
  s.require_f32(0);
  s.set_output(0, DType::u8, s.shape(0));
  s.set_output(1, DType::f32, {});
  s.set_output(2, DType::u8, {});
  return [](std::span<const TensorView> in, std::span<const TensorView> o) {
    const auto n = static_cast<std::size_t>(shape_numel(*in[0].shape));
    const DynamicParams p = quantize_dynamic(in[0].f32(), n, static_cast<std::uint8_t*>(o[0].data));
    *o[1].f32() = p.scale;
    *static_cast<std::uint8_t*>(o[2].data) = static_cast<std::uint8_t>(p.zero);
  };
}

// MatMulInteger as ONNX defines it: (A - a_zero) x (B - b_zero) in int32. A of any rank >= 1
// (its leading dimensions are rows), B 2-D; a_zero a scalar or one per row of a 2-D A, b_zero a
// scalar or one per column.
Kernel build_matmul_integer(OpSetup& s) {
  s.require_inputs(2, 4);
  const DType ta = s.inputs[0].dtype, tb = s.inputs[1].dtype;
  if ((ta != DType::u8 && ta != DType::i8) || (tb != DType::u8 && tb != DType::i8))
    s.fail("A and B must be UINT8 or INT8");
  const Shape& a = s.shape(0);
  const Shape& b = s.shape(1);
  if (a.empty()) s.fail("A must have rank 1 or more");
  if (b.size() != 2) s.fail("B has shape " + shape_text(b) + ": only a 2-D B is supported");
  const std::int64_t k = a.back(), n = b[1];
  if (b[0] != k) s.fail("A " + shape_text(a) + " and B " + shape_text(b) + " do not multiply");
  const std::int64_t m = shape_numel(a) / std::max<std::int64_t>(1, k);
  const bool a_rows = s.has(2) && s.inputs[2].numel() != 1, b_cols = s.has(3) && s.inputs[3].numel() != 1;
  if (s.has(2) && s.inputs[2].dtype != ta) s.fail("a_zero_point's type differs from A's");
  if (s.has(3) && s.inputs[3].dtype != tb) s.fail("b_zero_point's type differs from B's");
  if (a_rows && (a.size() != 2 || s.inputs[2].numel() != m))
    s.fail("a_zero_point must be a scalar or one per row of a 2-D A");
  if (b_cols && s.inputs[3].numel() != n) s.fail("b_zero_point must be a scalar or one per column of B");
  Shape out(a.begin(), a.end() - 1);
  out.push_back(n);
  s.set_output(0, DType::i32, out);
  const bool a_zp = s.has(2), b_zp = s.has(3);
  return [=](std::span<const TensorView> in, std::span<const TensorView> o) {
    auto* y = static_cast<std::int32_t*>(o[0].data);
    parallel_for(static_cast<std::size_t>(m), 1, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        const std::int32_t za = a_zp ? read_integer(ta, in[2].data, a_rows ? i : 0) : 0;
        for (std::int64_t j = 0; j < n; ++j) {
          const std::int32_t zb =
              b_zp ? read_integer(tb, in[3].data, b_cols ? static_cast<std::size_t>(j) : 0) : 0;
          // Summed in 64 bits; a sum beyond int32 (a huge K in a hostile file) wraps as the int32
          // output type does in other engines, instead of overflowing (undefined in C++).
          std::int64_t sum = 0;
          for (std::int64_t q = 0; q < k; ++q)
            sum += static_cast<std::int64_t>(
                       read_integer(ta, in[0].data,
                                    i * static_cast<std::size_t>(k) + static_cast<std::size_t>(q)) -
                       za) *
                   (read_integer(tb, in[1].data, static_cast<std::size_t>(q * n + j)) - zb);
          y[i * static_cast<std::size_t>(n) + static_cast<std::size_t>(j)] =
              static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(sum)));
        }
      }
    });
  };
}

// Weights packed once per plan and the buffers of one run, shared by the fused int8 operators.
struct Int8Product {
  std::shared_ptr<std::int8_t> packed;
  std::vector<std::int32_t> col_sums;
  std::vector<float> scales;
  std::vector<std::uint8_t> rows;  // the M x K activation rows, quantised
  std::vector<std::uint8_t> raw;   // and prepared for the kernels (prepare_u8s8_rows)
  std::vector<std::int8_t> shifted;
  std::vector<std::uint8_t> magnitude;
  bool seven_bit = false, relu = false, fixed = false;
  DynamicParams given;  // the activation's scale and zero point when the file fixed them
  kernels::U8S8GemmFn gemm = nullptr;
  std::int64_t m = 0, k = 0, n = 0;

  // W: int8 K x N constant; scale: 1 or N floats. Checks the node's attributes too.
  Int8Product(OpSetup& s, const HostTensor& w, const HostTensor& scale, std::int64_t rows_m)
      : m(rows_m), k(w.shape[0]), n(w.shape[1]) {
    if (k >= 65536) s.fail("K = " + std::to_string(k) + " could overflow the int32 sums (at most 65535)");
    if (scale.dtype != DType::f32 || (scale.numel() != 1 && scale.numel() != n))
      s.fail("internal: W scale must hold 1 or N floats");
    const std::string act = s.node.get_string("cpudl.activation", "");
    if (!act.empty() && act != "Relu") s.fail("internal: only Relu fuses into the int8 product");
    relu = act == "Relu";
    fixed = s.node.has("cpudl.a_scale");
    if (fixed) {
      given.scale = s.node.get_float("cpudl.a_scale", 0.0f);
      given.zero = static_cast<std::int32_t>(s.node.get_int("cpudl.a_zero", 0));
      if (!(given.scale > 0.0f) || given.zero < 0 || given.zero > 255)
        s.fail("internal: bad static activation parameters");
    }
    const std::size_t bytes =
        kernels::u8s8_packed_bytes(static_cast<std::size_t>(k), static_cast<std::size_t>(n));
    packed.reset(static_cast<std::int8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)), std::free);
    if (!packed) s.fail("out of memory packing the weights");
    col_sums.resize(static_cast<std::size_t>(n));
    const kernels::U8S8WeightRange range = kernels::pack_u8s8_weights(
        w.data<std::int8_t>(), static_cast<std::size_t>(n), static_cast<std::size_t>(k),
        static_cast<std::size_t>(n), packed.get(), col_sums.data());
    // Weights holding -128 cannot take the AVX2 kernel's exact paths (int8.h): the reference runs
    // them there.
    const bool exact = range != kernels::U8S8WeightRange::with_minus_128 ||
                       kernels::u8s8_gemm_takes_minus_128(native().u8s8_gemm.level);
    gemm = exact ? native().u8s8_gemm.fn : kernels::u8s8_gemm_variants().back().fn;
    seven_bit = range == kernels::U8S8WeightRange::seven_bit;
    scales = scale.as_float();
    rows.resize(static_cast<std::size_t>(m * k));
    const std::size_t ld = kernels::u8s8_padded_k(static_cast<std::size_t>(k));
    raw.resize(static_cast<std::size_t>(m) * ld);
    shifted.resize(static_cast<std::size_t>(m) * ld);
    magnitude.resize(static_cast<std::size_t>(m) * ld);
  }

  // c (M x N, row stride N) = the product of `rows` (quantised with p) and the weights, dequantised.
  void multiply(const DynamicParams& p, const float* bias, float* c) {
    const std::size_t ld = kernels::u8s8_padded_k(static_cast<std::size_t>(k));
    kernels::prepare_u8s8_rows(rows.data(), static_cast<std::size_t>(m), static_cast<std::size_t>(k),
                               static_cast<std::size_t>(k), raw.data(), shifted.data(), magnitude.data(), ld);
    kernels::U8S8GemmArgs g{};
    g.a = raw.data();
    g.a_shifted = shifted.data();
    g.a_magnitude = magnitude.data();
    g.lda = ld;
    g.k = static_cast<std::size_t>(k);
    g.a_zero = p.zero;
    g.a_scale = p.scale;
    g.b_packed = packed.get();
    g.b_seven_bit = seven_bit;
    g.b_col_sums = col_sums.data();
    g.b_scale = scales.data();
    g.b_scale_per_column = scales.size() > 1;
    g.bias = bias;
    g.relu = relu;
    g.ldc = static_cast<std::size_t>(n);
    const kernels::U8S8GemmFn fn = gemm;
    // Threads take blocks of 16 columns (the kernel's widest), each streaming its share of the
    // weights once over all rows; when there are fewer blocks than threads (a convolution's few
    // output channels over many pixels), blocks of rows instead. Either way a thread gets at
    // least ~64k multiply-adds.
    const auto col_blocks = static_cast<std::size_t>((n + 15) / 16);
    if (col_blocks >= static_cast<std::size_t>(compute_threads()) || m < 64) {
      const auto per_block = static_cast<std::size_t>(std::max<std::int64_t>(1, m * k * 16));
      g.m = static_cast<std::size_t>(m);
      g.c = c;
      parallel_for(col_blocks, std::max<std::size_t>(1, 65536 / per_block),
                   [&](std::size_t begin, std::size_t end) {
                     kernels::U8S8GemmArgs part = g;
                     part.n_begin = begin * 16;
                     part.n_end = std::min(end * 16, static_cast<std::size_t>(n));
                     fn(part);
                   });
      return;
    }
    const auto row_blocks = static_cast<std::size_t>((m + 31) / 32);
    const auto per_block = static_cast<std::size_t>(std::max<std::int64_t>(1, 32 * k * n));
    g.n_begin = 0;
    g.n_end = static_cast<std::size_t>(n);
    parallel_for(row_blocks, std::max<std::size_t>(1, 65536 / per_block),
                 [&](std::size_t begin, std::size_t end) {
                   kernels::U8S8GemmArgs part = g;
                   const std::size_t r0 = begin * 32, r1 = std::min(end * 32, static_cast<std::size_t>(m));
                   part.a = g.a + r0 * ld;
                   part.a_shifted = g.a_shifted + r0 * ld;
                   part.a_magnitude = g.a_magnitude + r0 * ld;
                   part.m = r1 - r0;
                   part.c = c + r0 * static_cast<std::size_t>(n);
                   fn(part);
                 });
  }
};

// cpudl.Int8MatMul (optimizer.cpp makes it): inputs X (f32, ... x K), W (int8 constant, K x N),
// W's scales (f32 constant, one or N), and an optional f32 bias of N; cpudl.activation "Relu"
// when the optimiser absorbed one. X is quantised per tensor on every run, with the scale and
// zero point of cpudl.a_scale/cpudl.a_zero when the file fixed them (QDQ, static), else measured
// as DynamicQuantizeLinear does; then multiplied by the weights packed once here.
Kernel build_int8_matmul(OpSetup& s) {
  s.require_inputs(3, 4);
  s.require_f32(0);
  const HostTensor& w = s.constant(1, "W");
  if (w.dtype != DType::i8 || w.shape.size() != 2) s.fail("internal: W must be a 2-D int8 constant");
  const Shape& x = s.shape(0);
  const std::int64_t k = w.shape[0], n = w.shape[1];
  if (x.empty() || x.back() != k)
    s.fail("input " + shape_text(x) + " does not multiply weights " + shape_text(w.shape));
  const bool bias = s.has(3);
  if (bias && (s.inputs[3].dtype != DType::f32 || s.inputs[3].numel() != n))
    s.fail("internal: the bias must hold N floats");
  Shape out(x.begin(), x.end() - 1);
  out.push_back(n);
  s.set_output(0, DType::f32, out);
  auto st = std::make_shared<Int8Product>(s, w, s.constant(2, "W scale"),
                                          shape_numel(x) / std::max<std::int64_t>(1, k));
  return [st, bias](std::span<const TensorView> in, std::span<const TensorView> o) {
    DynamicParams p = st->given;
    if (st->fixed)
      native().f32_quantize_u8.fn(in[0].f32(), st->rows.size(), p.scale, p.zero, st->rows.data());
    else
      p = quantize_dynamic(in[0].f32(), st->rows.size(), st->rows.data());
    st->multiply(p, bias ? in[3].f32() : nullptr, o[0].f32());
  };
}

// cpudl.Int8Conv (optimizer.cpp makes it from a QDQ Conv): inputs X (f32, or u8 when the Int8Conv
// before it requantised its output for this one: keep_activations_in_int8), W (int8 constant,
// O x C/group x kh x kw), W's scales (1 or O), an optional f32 bias of O, an optional f32
// residual (u8 at cpudl.residual_scale/residual_zero when the output is u8); the Conv's window and
// the layouts assign_layouts chose; the activation's fixed scale and zero point (cpudl.a_scale,
// cpudl.a_zero). Output f32, or u8 at cpudl.out_scale/out_zero.
// An f32 X (NCHW or NHWC) is quantised by one oneDNN reorder into an NHWC buffer the convolution
// owns; then oneDNN's int8 convolution runs, its weights reordered once here.
Kernel build_int8_conv(OpSetup& s) {
  s.require_inputs(3, 5);
  const DType xt = s.inputs[0].dtype;
  if (xt != DType::f32 && xt != DType::u8) s.fail("input X must be FLOAT or UINT8");
  const HostTensor& w = s.constant(1, "W");
  if (w.dtype != DType::i8) s.fail("internal: W must be an int8 constant");
  if (!s.node.has("cpudl.a_scale")) s.fail("internal: an int8 convolution needs its activation's scale");
  onednn::Int8ConvSpec spec;
  spec.shape = conv_shape(s, 3);
  const onednn::ConvShape& c = spec.shape;
  const Shape out = {c.batch, c.out_channels, c.out_height(), c.out_width()};
  const bool bias = s.has(3), residual = s.has(4);
  if (bias && s.inputs[3].dtype != DType::f32) s.fail("internal: the bias must be FLOAT");
  if (residual && s.shape(4) != out)
    s.fail("fused residual has shape " + shape_text(s.shape(4)) + ", expected " + shape_text(out));
  spec.src_scale = s.node.get_float("cpudl.a_scale", 0.0f);
  spec.src_zero = static_cast<std::int32_t>(s.node.get_int("cpudl.a_zero", 0));
  spec.weight_scales = s.constant(2, "W scale").as_float();
  spec.u8_output = s.node.has("cpudl.out_scale");
  spec.dst_scale = s.node.get_float("cpudl.out_scale", 1.0f);
  spec.dst_zero = static_cast<std::int32_t>(s.node.get_int("cpudl.out_zero", 0));
  const FusedActivation act = fused_activation(s);
  spec.activation = act.kind;
  spec.clip_min = act.lo;
  spec.clip_max = act.hi;
  spec.residual = residual;
  if (residual) {
    // A uint8 residual (keep_activations_in_int8) comes with its parameters and a uint8 output.
    const DType want = spec.u8_output ? DType::u8 : DType::f32;
    if (s.inputs[4].dtype != want)
      s.fail(std::string("internal: the fused residual must be ") + (spec.u8_output ? "UINT8" : "FLOAT") +
             " like the output");
    spec.residual_scale = s.node.get_float("cpudl.residual_scale", 0.0f);
    spec.residual_zero = static_cast<std::int32_t>(s.node.get_int("cpudl.residual_zero", 0));
  }
  if (!c.dst_layout) spec.shape.dst_layout = c.layout;
  spec.f32_source = xt == DType::f32;
  if (!onednn::int8_convolution_exact(std::span(w.data<std::int8_t>(), static_cast<std::size_t>(w.numel()))))
    s.fail("internal: 8-bit weights on a CPU without VNNI (the optimiser keeps such a Conv in float)");
  s.set_output(0, spec.u8_output ? DType::u8 : DType::f32, out);
  if (residual) s.in_place_input = 4;  // the sum lands on the residual where it dies here
  // Planning's shape pass only needs the output; the primitive (a JIT and a weight reorder) is made
  // for the plan, or on a first run should the shape pass ever fold a constant input.
  struct State {
    onednn::Int8ConvSpec spec;
    std::unique_ptr<onednn::Int8Convolution> conv;
  };
  auto st = std::make_shared<State>();
  st->spec = spec;
  if (!s.shape_pass) {
    st->conv = std::make_unique<onednn::Int8Convolution>(
        spec, w.data<std::int8_t>(), bias ? s.constant(3, "bias B").data<float>() : nullptr);
    s.implementation = "onednn " + st->conv->implementation();
  }
  return [st, bias, residual, xt](std::span<const TensorView> in, std::span<const TensorView> o) {
    if (!st->conv)
      st->conv = std::make_unique<onednn::Int8Convolution>(
          st->spec, static_cast<const std::int8_t*>(in[1].data), bias ? in[3].f32() : nullptr);
    const void* r = residual ? in[4].data : nullptr;
    if (xt == DType::f32)
      st->conv->run_f32(in[0].f32(), o[0].data, r);
    else
      st->conv->run(static_cast<const std::uint8_t*>(in[0].data), o[0].data, r);
  };
}

}  // namespace

std::string describe_int8_execution(const std::map<std::string, int>& ops) {
  std::string out;
  if (ops.count(kInt8ConvOp))
    out +=
        "int8 convolutions run on oneDNN's int8 kernels (implementations listed per node), activations "
        "kept uint8 between them where only int8 readers take them (int8 convolutions, residuals added "
        "into uint8 outputs, max pools); ";
  if (ops.count(kInt8MatMulOp)) {
    const auto& k = native().u8s8_gemm;
    out += std::string("int8 products run on ") + k.name;
    if (k.level == IsaLevel::generic)
      out += " (the portable reference: exact, slow)";
    else if (k.level >= IsaLevel::avx512_vnni)
      out += " (VPDPBUSD: u8 x s8 summed in int32, exact for any weights)";
    else
      out +=
          " (exact u8 x s8 without VNNI: 7-bit weights on VPMADDUBSW directly, 8-bit weights with the "
          "activations shifted by 128 and the sign moved onto the weights, so no int16 pair sum can "
          "saturate)";
  }
  if (ops.count("MatMulInteger"))
    out += std::string(out.empty() ? "" : "; ") +
           "MatMulInteger outside the dynamic pattern runs on plain loops";
  if (ops.count("QuantizeLinear") || ops.count("DequantizeLinear"))
    out += std::string(out.empty() ? "" : "; ") +
           "QDQ pairs left around float operators run as operators: int8 numbers at float speed";
  return out;
}

namespace {

const OpEntry kOps[] = {
    {"QuantizeLinear", build_quantize_linear},
    {"DequantizeLinear", build_dequantize_linear},
    {"DynamicQuantizeLinear", build_dynamic_quantize_linear},
    {"MatMulInteger", build_matmul_integer},
    {kInt8MatMulOp, build_int8_matmul},
    {kInt8ConvOp, build_int8_conv},
};

}  // namespace

std::span<const OpEntry> quantization_ops() { return kOps; }

}  // namespace cpudl::infer
