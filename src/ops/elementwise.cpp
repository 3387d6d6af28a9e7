// Element-wise ops: broadcasting arithmetic and activations, forward on the native kernels,
// backward as PyTorch's derivatives.
#include <cmath>

#include "ops/op_helpers.h"
#include "runtime/op_profile.h"

namespace cpudl {
using namespace ops_detail;

namespace {

// out = op(a, b) with broadcasting: the contiguous kernel on whole rows where both inputs run
// contiguously along the last dimension, the scalar `op` elsewhere (stride-0 rows).
template <class Scalar>
Tensor broadcast_binary(const Tensor& a, const Tensor& b, kernels::F32BinaryFn kernel, Scalar op,
                        const char* name) {
  profiling::Scope profile(name);
  require_f32(a, name, "first operand");
  require_f32(b, name, "second operand");
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  if (a.shape() == b.shape() && is_dense(a)) return map_pair_in_layout(kernel, a, b);  // one flat loop
  Tensor out = Tensor::empty(shape);
  NoGradGuard no_grad;
  const Tensor ea = a.expand(shape), eb = b.expand(shape);
  const float *pa = ea.data(), *pb = eb.data();
  float* po = out.data();
  const std::int64_t sa = shape.empty() ? 1 : ea.strides().back(),
                     sb = shape.empty() ? 1 : eb.strides().back();
  for_each_row(shape, ea.strides(), eb.strides(),
               [&](std::int64_t oa, std::int64_t ob, std::int64_t oo, std::int64_t n) {
                 if (sa == 1 && sb == 1) {
                   kernel(pa + oa, pb + ob, po + oo, static_cast<std::size_t>(n));
                 } else {
                   for (std::int64_t i = 0; i < n; ++i) po[oo + i] = op(pa[oa + i * sa], pb[ob + i * sb]);
                 }
               });
  return out;
}

Tensor detached(const Tensor& t) { return t.detach(); }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(
      a, b, native().f32_add.fn, [](float x, float y) { return x + y; }, "add");
  const Shape sa = a.shape(), sb = b.shape();
  autograd::record(out, "add", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(
      a, b, native().f32_sub.fn, [](float x, float y) { return x - y; }, "sub");
  const Shape sa = a.shape(), sb = b.shape();
  autograd::record(out, "sub", {a, b}, [sa, sb](const Tensor& g) {
    return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(
      a, b, native().f32_mul.fn, [](float x, float y) { return x * y; }, "mul");
  const Tensor av = detached(a), bv = detached(b);
  autograd::record(out, "mul", {a, b}, [av, bv](const Tensor& g) {
    return std::vector<Tensor>{sum_to(mul(g, bv), av.shape()), sum_to(mul(g, av), bv.shape())};
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(
      a, b, native().f32_div.fn, [](float x, float y) { return x / y; }, "div");
  const Tensor av = detached(a), bv = detached(b);
  autograd::record(out, "div", {a, b}, [av, bv](const Tensor& g) {
    const Tensor ga = div(g, bv);
    return std::vector<Tensor>{sum_to(ga, av.shape()), sum_to(neg(mul(ga, div(av, bv))), bv.shape())};
  });
  return out;
}

Tensor add(const Tensor& a, float b) { return add(a, Tensor::scalar(b)); }
Tensor mul(const Tensor& a, float b) { return mul(a, Tensor::scalar(b)); }
Tensor neg(const Tensor& a) { return mul(a, -1.0f); }

void add_(const Tensor& a, const Tensor& b) {
  profiling::Scope profile("add_");
  require_f32(a, "add_", "destination");
  require_f32(b, "add_", "source");
  if (broadcast_shapes(a.shape(), b.shape(), "add_") != a.shape())
    throw Error("add_: cannot add shape " + shape_text(b.shape()) + " into " + shape_text(a.shape()));
  if (a.shape() == b.shape() && same_dense_layout(a, b)) {  // one flat loop, channels-last too
    float* pa = a.data();
    const float* pb = b.data();
    const auto add_fn = native().f32_add.fn;
    parallel_for(static_cast<std::size_t>(a.numel()), kGrain,
                 [&](std::size_t s, std::size_t e) { add_fn(pa + s, pb + s, pa + s, e - s); });
  } else {
    const Tensor sum_values = broadcast_binary(
        a, b, native().f32_add.fn, [](float x, float y) { return x + y; }, "add_");
    copy_strided(sum_values, a);
  }
  a.bump_version();
}

// ---- unary

Tensor exp(const Tensor& x) {
  profiling::Scope profile("exp");
  require_f32(x, "exp", "input");
  Tensor out = map_contiguous(x, native().f32_exp.fn);
  const Tensor y = detached(out);
  autograd::record(out, "exp", {x}, [y](const Tensor& g) { return std::vector<Tensor>{mul(g, y)}; });
  return out;
}

Tensor log(const Tensor& x) {
  profiling::Scope profile("log");
  require_f32(x, "log", "input");
  Tensor out = map_contiguous(x, native().f32_log.fn);
  const Tensor xv = detached(x);
  autograd::record(out, "log", {x}, [xv](const Tensor& g) { return std::vector<Tensor>{div(g, xv)}; });
  return out;
}

Tensor sqrt(const Tensor& x) {
  profiling::Scope profile("sqrt");
  require_f32(x, "sqrt", "input");
  Tensor out = map_contiguous(x, [](const float* in, float* o, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) o[i] = std::sqrt(in[i]);
  });
  const Tensor y = detached(out);
  autograd::record(out, "sqrt", {x},
                   [y](const Tensor& g) { return std::vector<Tensor>{div(mul(g, 0.5f), y)}; });
  return out;
}

Tensor pow(const Tensor& x, float p) {
  profiling::Scope profile("pow");
  require_f32(x, "pow", "input");
  Tensor out = map_contiguous(x, [p](const float* in, float* o, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) o[i] = std::pow(in[i], p);
  });
  const Tensor xv = detached(x);
  autograd::record(out, "pow", {x}, [xv, p](const Tensor& g) {
    if (p == 0.0f) return std::vector<Tensor>{Tensor::zeros(xv.shape())};
    return std::vector<Tensor>{mul(g, mul(pow(xv, p - 1.0f), p))};
  });
  return out;
}

Tensor clamp(const Tensor& x, std::optional<float> lo, std::optional<float> hi) {
  profiling::Scope profile("clamp");
  require_f32(x, "clamp", "input");
  const float l = lo.value_or(-INFINITY), h = hi.value_or(INFINITY);
  Tensor out = map_contiguous(x, [l, h](const float* in, float* o, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) o[i] = std::isnan(in[i]) ? in[i] : std::min(std::max(in[i], l), h);
  });
  const Tensor xv = detached(x);
  autograd::record(out, "clamp", {x}, [xv, l, h](const Tensor& g) {
    // PyTorch: the gradient passes where min <= x <= max.
    const Tensor gc = contiguous_values(g), xc = contiguous_values(xv);
    Tensor dx = Tensor::empty(xv.shape());
    for (std::int64_t i = 0; i < dx.numel(); ++i)
      dx.data()[i] = (xc.data()[i] >= l && xc.data()[i] <= h) ? gc.data()[i] : 0.0f;
    return std::vector<Tensor>{dx};
  });
  return out;
}

namespace {
// An activation whose derivative kernel takes the forward input (relu, gelu) or output.
Tensor activation(const Tensor& x, const char* name,
                  const kernels::KernelVariant<kernels::F32UnaryFn>& forward,
                  const kernels::KernelVariant<kernels::F32UnaryBackwardFn>& backward,
                  bool backward_uses_output) {
  profiling::Scope profile(name);
  require_f32(x, name, "input");
  Tensor out = map_contiguous(x, forward.fn);
  const Tensor saved =
      backward_uses_output ? out.detach() : (is_dense(x) ? x.detach() : contiguous_values(x));
  const auto fn = backward.fn;
  autograd::record(out, name, {x}, [saved, fn](const Tensor& g) {
    return std::vector<Tensor>{map_pair_in_layout(fn, saved, g)};
  });
  return out;
}
}  // namespace

Tensor relu(const Tensor& x) {
  return activation(x, "relu", native().f32_relu, native().f32_relu_backward, false);
}
Tensor add_relu(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || !is_dense(a)) return relu(add(a, b));  // broadcasting: two ops
  profiling::Scope profile("add_relu");
  require_f32(a, "add_relu", "first input");
  require_f32(b, "add_relu", "second input");
  Tensor out = map_pair_in_layout(native().f32_add_relu.fn, a, b);
  // relu's mask from the output: out > 0 exactly where a + b > 0 (NaN passes no gradient either way).
  const Tensor saved = out.detach();
  const auto mask = native().f32_relu_backward.fn;
  autograd::record(out, "add_relu", {a, b}, [saved, mask](const Tensor& g) {
    const Tensor dx = map_pair_in_layout(mask, saved, g);
    return std::vector<Tensor>{dx, dx};
  });
  return out;
}
Tensor gelu(const Tensor& x) {
  return activation(x, "gelu", native().f32_gelu, native().f32_gelu_backward, false);
}
Tensor sigmoid(const Tensor& x) {
  return activation(x, "sigmoid", native().f32_sigmoid, native().f32_sigmoid_backward, true);
}
Tensor tanh(const Tensor& x) {
  return activation(x, "tanh", native().f32_tanh, native().f32_tanh_backward, true);
}

Tensor leaky_relu(const Tensor& x, float slope) {
  profiling::Scope profile("leaky_relu");
  require_f32(x, "leaky_relu", "input");
  Tensor out = map_contiguous(x, [slope](const float* in, float* o, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) o[i] = in[i] > 0.0f ? in[i] : in[i] * slope;
  });
  const Tensor xv = contiguous_values(x);
  autograd::record(out, "leaky_relu", {x}, [xv, slope](const Tensor& g) {
    const Tensor gc = contiguous_values(g);
    Tensor dx = Tensor::empty(xv.shape());
    for (std::int64_t i = 0; i < dx.numel(); ++i)
      dx.data()[i] = xv.data()[i] > 0.0f ? gc.data()[i] : gc.data()[i] * slope;
    return std::vector<Tensor>{dx};
  });
  return out;
}

}  // namespace cpudl
