// matmul and linear on oneDNN (src/dense/onednn/), with their backward passes.
#include "dense/matmul/matmul_list.h"
#include "dense/onednn/dense.h"
#include "kernels/narrow/narrow.h"
#include "ops/op_helpers.h"
#include "runtime/op_profile.h"

namespace cpudl {
using namespace ops_detail;

namespace {

// Batched product of contiguous [batch, m, k] x [batch or 1, k, n] buffers, with transposes.
void batched_matmul(const float* a, const float* b, float* c, std::int64_t batch, std::int64_t m,
                    std::int64_t n, std::int64_t k, bool ta, bool tb, bool b_shared) {
  if (b_shared && !ta) {
    dense::matmul(onednn::MatmulShape{1, batch * m, n, k, false, tb}, a, b, c);  // fold the batch into m
  } else if (b_shared) {
    for (std::int64_t i = 0; i < batch; ++i)
      dense::matmul(onednn::MatmulShape{1, m, n, k, ta, tb}, a + i * m * k, b, c + i * m * n);
  } else {
    dense::matmul(onednn::MatmulShape{batch, m, n, k, ta, tb}, a, b, c);
  }
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  profiling::Scope profile("matmul");
  require_f32(a_in, "matmul", "first operand");
  require_f32(b_in, "matmul", "second operand");
  if (a_in.dim() == 0 || b_in.dim() == 0) throw Error("matmul: operands must have at least one dimension");
  // Vectors are promoted to matrices and the added dimension removed again, as torch.matmul.
  const bool a_vector = a_in.dim() == 1, b_vector = b_in.dim() == 1;
  const Tensor a = a_vector ? a_in.unsqueeze(0) : a_in;
  const Tensor b = b_vector ? b_in.unsqueeze(1) : b_in;
  const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (b.size(-2) != k)
    throw Error("matmul: shapes " + shape_text(a_in.shape()) + " and " + shape_text(b_in.shape()) +
                " cannot be multiplied (" + std::to_string(k) + " vs " + std::to_string(b.size(-2)) + ")");
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2),
      batch_b(b.shape().begin(), b.shape().end() - 2);
  if (!batch_b.empty() && batch_a != batch_b)
    throw Error("matmul: batch dimensions " + shape_text(batch_a) + " and " + shape_text(batch_b) +
                " differ");
  const std::int64_t batch = shape_numel(batch_a);
  Shape out_shape = batch_a;
  out_shape.push_back(m);
  out_shape.push_back(n);
  const Tensor ac = contiguous_values(a), bc = contiguous_values(b);
  Tensor out = Tensor::empty(out_shape);
  if (out.numel() > 0) {
    if (k == 0)
      std::fill(out.data(), out.data() + out.numel(), 0.0f);
    else
      batched_matmul(ac.data(), bc.data(), out.data(), batch, m, n, k, false, false, batch_b.empty());
    count_forward_flops(2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                        static_cast<double>(k));
  }
  const bool b_shared = batch_b.empty();
  autograd::record(out, "matmul", {a, b}, [ac, bc, batch, m, n, k, b_shared](const Tensor& g) {
    const Tensor gc = contiguous_values(g);
    Tensor da = Tensor::empty(ac.shape()), db = Tensor::zeros(bc.shape());
    batched_matmul(gc.data(), bc.data(), da.data(), batch, m, k, n, false, true, b_shared);  // dA = G B^T
    if (b_shared) {
      dense::matmul(onednn::MatmulShape{1, k, n, batch * m, true, false}, ac.data(), gc.data(),
                    db.data());  // A^T G
    } else {
      dense::matmul(onednn::MatmulShape{batch, k, n, m, true, false}, ac.data(), gc.data(), db.data());
    }
    return std::vector<Tensor>{da, db};
  });
  Tensor result = out;
  if (a_vector) result = result.squeeze(-2);
  if (b_vector) result = result.squeeze(-1);
  return result;
}

namespace {

// Layers with few outputs and many inputs (a classifier on a flattened feature map) run on the
// narrow kernels (kernels/narrow/narrow.h), bound by memory where oneDNN's GEMM kernels were not.
// Below ~1K inputs the activation is small and oneDNN stays.
constexpr std::int64_t kNarrowMinInputs = 1024;
bool narrow_linear(const onednn::LinearShape& s) {
  return s.out <= static_cast<std::int64_t>(kernels::kNarrowLinearMaxOutputs) && s.in >= kNarrowMinInputs;
}

// Rows split over the threads (forward, data gradient) or columns (weight gradient: each thread
// writes its own columns of dw), in whole cache lines.
void narrow_forward(const onednn::LinearShape& s, const float* x, const float* w, const float* b, float* y) {
  const auto m = static_cast<std::size_t>(s.batch), k = static_cast<std::size_t>(s.in),
             n = static_cast<std::size_t>(s.out);
  const auto fn = native().f32_narrow_linear_forward.fn;
  parallel_for(m, 3, [&](std::size_t i0, std::size_t i1) {
    fn(x + i0 * k, w, y + i0 * n, i1 - i0, k, n, k);
    if (b)
      for (std::size_t i = i0; i < i1; ++i)
        for (std::size_t j = 0; j < n; ++j) y[i * n + j] += b[j];
  });
}

void narrow_backward_data(const onednn::LinearShape& s, const float* dy, const float* w, float* dx) {
  const auto m = static_cast<std::size_t>(s.batch), k = static_cast<std::size_t>(s.in),
             n = static_cast<std::size_t>(s.out);
  const auto fn = native().f32_narrow_linear_backward_data.fn;
  parallel_for(m, 4,
               [&](std::size_t i0, std::size_t i1) { fn(dy + i0 * n, w, dx + i0 * k, i1 - i0, k, n, k); });
}

void narrow_backward_weights(const onednn::LinearShape& s, const float* x, const float* dy, float* dw,
                             float* db) {
  const auto m = static_cast<std::size_t>(s.batch), k = static_cast<std::size_t>(s.in),
             n = static_cast<std::size_t>(s.out);
  const auto fn = native().f32_narrow_linear_backward_weights.fn;
  const std::size_t lines = (k + 15) / 16;
  parallel_for(lines, 16, [&](std::size_t l0, std::size_t l1) {
    const std::size_t k0 = l0 * 16, k1 = std::min(k, l1 * 16);
    for (std::size_t j = 0; j < n; ++j) std::fill(dw + j * k + k0, dw + j * k + k1, 0.0f);  // the kernel adds
    fn(x + k0, dy, dw + k0, m, k1 - k0, n, k);
  });
  if (db)
    for (std::size_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::size_t i = 0; i < m; ++i) acc += dy[i * n + j];
      db[j] = acc;
    }
}

// linear and linear_relu: y = x W^T + b, with the ReLU (when `relu`) applied as y is written
// (oneDNN's post-op; after the narrow kernels, on the small output) and its mask (y > 0) applied
// to the incoming gradient before the backward products.
Tensor linear_op(const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu) {
  profiling::Scope profile("linear");
  require_f32(x, "linear", "input");
  require_f32(weight, "linear", "weight");
  if (weight.dim() != 2)
    throw Error("linear: weight of shape " + shape_text(weight.shape()) + ", expected [out, in]");
  const std::int64_t in = weight.size(1), out_features = weight.size(0);
  if (x.dim() < 1 || x.size(-1) != in)
    throw Error("linear: input of shape " + shape_text(x.shape()) + " does not end in " + std::to_string(in) +
                " features (weight " + shape_text(weight.shape()) + ")");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != out_features))
    throw Error("linear: bias of shape " + shape_text(bias.shape()) + ", expected [" +
                std::to_string(out_features) + "]");
  const std::int64_t rows = x.numel() / std::max<std::int64_t>(in, 1);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  const Tensor xc = contiguous_values(x), wc = contiguous_values(weight);
  const Tensor bc = bias.defined() ? contiguous_values(bias) : Tensor();
  Tensor y = Tensor::empty(out_shape);
  // Under Bf16Autocast the oneDNN products run in bf16 (the narrow kernels, bound by memory,
  // stay f32).
  const onednn::LinearShape s{rows, in, out_features, bf16_autocast_enabled()};
  const bool narrow = narrow_linear(s);
  if (rows > 0 && narrow) {
    narrow_forward(s, xc.data(), wc.data(), bc.defined() ? bc.data() : nullptr, y.data());
    if (relu) {
      const auto fn = native().f32_relu.fn;
      fn(y.data(), y.data(), static_cast<std::size_t>(y.numel()));
    }
  } else if (rows > 0) {
    onednn::linear_forward(s, xc.data(), wc.data(), bc.defined() ? bc.data() : nullptr, y.data(),
                           relu ? onednn::Activation::relu : onednn::Activation::none,
                           weight.is_contiguous() ? weights_version(weight) : 0);
  }
  count_forward_flops(2.0 * static_cast<double>(rows) * static_cast<double>(in) *
                      static_cast<double>(out_features));
  // Gradients only for inputs that need them (a first layer's input needs none).
  const bool need_dx = x.requires_grad(), need_dw = weight.requires_grad(),
             need_db = bias.defined() && bias.requires_grad();
  const Tensor saved_y = relu ? y.detach() : Tensor();
  autograd::record(y, "linear", {x, weight, bias},
                   [xc, wc, s, narrow, need_dx, need_dw, need_db, saved_y](const Tensor& g) {
                     Tensor gc = contiguous_values(g);
                     // The fused ReLU's mask: the gradient passes where y > 0.
                     if (saved_y.defined())
                       gc = map_pair_in_layout(native().f32_relu_backward.fn, saved_y, gc);
                     Tensor dx, dw, db;
                     if (need_dx) {
                       dx = Tensor::empty(xc.shape());
                       if (s.batch > 0 && narrow)
                         narrow_backward_data(s, gc.data(), wc.data(), dx.data());
                       else
                         onednn::linear_backward_data(s, gc.data(), wc.data(), dx.data());
                     }
                     if (need_dw || need_db) {
                       dw = Tensor::empty(wc.shape());
                       if (need_db) db = Tensor::empty({s.out});
                       if (narrow)
                         narrow_backward_weights(s, xc.data(), gc.data(), dw.data(),
                                                 need_db ? db.data() : nullptr);
                       else
                         onednn::linear_backward_weights(s, xc.data(), gc.data(), dw.data(),
                                                         need_db ? db.data() : nullptr);
                       if (!need_dw) dw = Tensor();
                     }
                     return std::vector<Tensor>{dx, dw, db};
                   });
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_op(x, weight, bias, false);
}
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_op(x, weight, bias, true);
}

}  // namespace cpudl
