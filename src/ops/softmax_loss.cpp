// softmax, log_softmax and the losses (mean reduction, as PyTorch's default).
#include <cmath>

#include "ops/op_helpers.h"
#include "runtime/op_profile.h"

namespace cpudl {
using namespace ops_detail;

namespace {

// x with `dim` moved last, as contiguous rows; and the permutation that undoes it.
struct LastDim {
  Tensor rows;
  std::vector<std::int64_t> order, inverse;
  std::int64_t cols = 0, count = 0;
};

LastDim move_last(const Tensor& x, std::int64_t dim) {
  NoGradGuard no_grad;
  const std::int64_t nd = x.dim(), d = normalize_dim(dim, nd);
  LastDim l;
  for (std::int64_t i = 0; i < nd; ++i)
    if (i != d) l.order.push_back(i);
  l.order.push_back(d);
  l.inverse.assign(static_cast<std::size_t>(nd), 0);
  for (std::size_t i = 0; i < l.order.size(); ++i)
    l.inverse[static_cast<std::size_t>(l.order[i])] = static_cast<std::int64_t>(i);
  l.rows = nd == 0 ? x.reshape({1}) : x.permute(l.order).contiguous();
  l.cols = nd == 0 ? 1 : x.size(d);
  l.count = l.cols ? l.rows.numel() / l.cols : 0;
  return l;
}

Tensor restore(const Tensor& rows_out, const LastDim& l, const Shape& shape) {
  NoGradGuard no_grad;
  if (shape.empty()) return rows_out.reshape({});
  return rows_out.permute(l.inverse).contiguous();
}

Tensor softmax_family(const Tensor& x, std::int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  profiling::Scope profile(name);
  require_f32(x, name, "input");
  const LastDim l = move_last(x, dim);
  Tensor y_rows = Tensor::empty(l.rows.shape());
  const auto fn = log ? native().f32_log_softmax.fn : native().f32_softmax.fn;
  const auto cols = static_cast<std::size_t>(l.cols);
  const float* in = l.rows.data();
  float* out = y_rows.data();
  parallel_for(
      static_cast<std::size_t>(l.count), std::max<std::size_t>(1, kGrain / std::max<std::size_t>(cols, 1)),
      [&](std::size_t b, std::size_t e) { fn(in + b * cols, out + b * cols, e - b, cols, cols, cols); });
  Tensor y = restore(y_rows, l, x.shape());
  const Tensor saved = y_rows.detach();
  autograd::record(y, name, {x}, [saved, l, log, shape = x.shape()](const Tensor& g) {
    // softmax: dx = y (g - sum(g y)); log_softmax: dx = g - softmax sum(g).
    const Tensor gr = move_last(g, l.order.empty() ? 0 : l.order.back()).rows;
    Tensor dx = Tensor::empty(gr.shape());
    const std::int64_t cols = l.cols;
    for (std::int64_t r = 0; r < l.count; ++r) {
      const float* yr = saved.data() + r * cols;
      const float* grr = gr.data() + r * cols;
      float* d = dx.data() + r * cols;
      double s = 0;
      for (std::int64_t j = 0; j < cols; ++j) s += log ? grr[j] : static_cast<double>(grr[j]) * yr[j];
      for (std::int64_t j = 0; j < cols; ++j)
        d[j] =
            log ? static_cast<float>(grr[j] - std::exp(yr[j]) * s) : static_cast<float>(yr[j] * (grr[j] - s));
    }
    return std::vector<Tensor>{restore(dx, l, shape)};
  });
  return y;
}

// Class indices as int64, checked against [0, classes).
std::vector<std::int64_t> class_targets(const Tensor& target, std::int64_t rows, std::int64_t classes,
                                        const char* op) {
  if (target.dim() != 1 || target.size(0) != rows)
    throw Error(std::string(op) + ": target of shape " + shape_text(target.shape()) + ", expected [" +
                std::to_string(rows) + "]");
  std::vector<std::int64_t> t(static_cast<std::size_t>(rows));
  const Tensor tc = contiguous_values(target);
  for (std::int64_t i = 0; i < rows; ++i) {
    switch (tc.dtype()) {
      case DType::i64:
        t[static_cast<std::size_t>(i)] = tc.data_as<std::int64_t>()[i];
        break;
      case DType::i32:
        t[static_cast<std::size_t>(i)] = tc.data_as<std::int32_t>()[i];
        break;
      default:
        throw Error(std::string(op) + ": target must hold class indices (i32 or i64), not " +
                    std::string(dtype_name(tc.dtype())));
    }
    if (t[static_cast<std::size_t>(i)] < 0 || t[static_cast<std::size_t>(i)] >= classes)
      throw Error(std::string(op) + ": target " + std::to_string(t[static_cast<std::size_t>(i)]) +
                  " at position " + std::to_string(i) + " is out of range [0, " + std::to_string(classes) +
                  ")");
  }
  return t;
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) { return softmax_family(x, dim, false); }
Tensor log_softmax(const Tensor& x, std::int64_t dim) { return softmax_family(x, dim, true); }

Tensor cross_entropy(const Tensor& logits, const Tensor& target, float label_smoothing) {
  profiling::Scope profile("cross_entropy");
  require_f32(logits, "cross_entropy", "logits");
  if (logits.dim() != 2)
    throw Error("cross_entropy: logits of shape " + shape_text(logits.shape()) + ", expected [N, C]");
  if (label_smoothing < 0.0f || label_smoothing > 1.0f)
    throw Error("cross_entropy: label_smoothing must be in [0, 1]");
  const std::int64_t rows = logits.size(0), classes = logits.size(1);
  if (rows == 0) throw Error("cross_entropy: empty batch");
  const std::vector<std::int64_t> t64 = class_targets(target, rows, classes, "cross_entropy");
  std::vector<std::int32_t> labels(t64.begin(), t64.end());
  const Tensor lc = contiguous_values(logits);
  std::vector<float> row_loss(static_cast<std::size_t>(rows));
  Tensor dlogits = Tensor::empty(logits.shape());
  const bool need_grad = grad_mode_enabled() && logits.requires_grad();
  const auto c = static_cast<std::size_t>(classes);
  parallel_for(static_cast<std::size_t>(rows), std::max<std::size_t>(1, kGrain / c),
               [&](std::size_t b, std::size_t e) {
                 std::vector<float> scratch(c);  // the kernel's row of exponentials
                 native().f32_cross_entropy.fn(
                     {lc.data() + b * c, labels.data() + b, e - b, c, c, label_smoothing, row_loss.data() + b,
                      need_grad ? dlogits.data() + b * c : nullptr, c, scratch.data()});
               });
  double total = 0;
  for (float v : row_loss) total += v;
  Tensor loss = Tensor::scalar(static_cast<float>(total / static_cast<double>(rows)));
  autograd::record(loss, "cross_entropy", {logits}, [dlogits, rows](const Tensor& g) {
    return std::vector<Tensor>{mul(dlogits, g.item() / static_cast<float>(rows))};
  });
  return loss;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target) {
  profiling::Scope profile("nll_loss");
  require_f32(log_probs, "nll_loss", "input");
  if (log_probs.dim() != 2)
    throw Error("nll_loss: input of shape " + shape_text(log_probs.shape()) + ", expected [N, C]");
  const std::int64_t rows = log_probs.size(0), classes = log_probs.size(1);
  const std::vector<std::int64_t> t = class_targets(target, rows, classes, "nll_loss");
  const Tensor lc = contiguous_values(log_probs);
  double total = 0;
  for (std::int64_t i = 0; i < rows; ++i) total -= lc.data()[i * classes + t[static_cast<std::size_t>(i)]];
  Tensor loss = Tensor::scalar(static_cast<float>(total / static_cast<double>(rows)));
  autograd::record(loss, "nll_loss", {log_probs}, [t, rows, classes](const Tensor& g) {
    Tensor dx = Tensor::zeros({rows, classes});
    const float v = -g.item() / static_cast<float>(rows);
    for (std::int64_t i = 0; i < rows; ++i) dx.data()[i * classes + t[static_cast<std::size_t>(i)]] = v;
    return std::vector<Tensor>{dx};
  });
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  profiling::Scope profile("mse_loss");
  if (input.shape() != target.shape())
    throw Error("mse_loss: input of shape " + shape_text(input.shape()) + " and target of shape " +
                shape_text(target.shape()));
  const Tensor d = sub(input, target);
  return mean(mul(d, d));
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target) {
  profiling::Scope profile("binary_cross_entropy_with_logits");
  require_f32(logits, "binary_cross_entropy_with_logits", "logits");
  require_f32(target, "binary_cross_entropy_with_logits", "target");
  if (logits.shape() != target.shape())
    throw Error("binary_cross_entropy_with_logits: logits of shape " + shape_text(logits.shape()) +
                " and target of shape " + shape_text(target.shape()));
  const Tensor x = contiguous_values(logits), y = contiguous_values(target);
  const std::int64_t n = x.numel();
  // max(x, 0) - x y + log(1 + exp(-|x|)): stable for large |x|.
  double total = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double xi = x.data()[i];
    total += std::max(xi, 0.0) - xi * y.data()[i] + std::log1p(std::exp(-std::fabs(xi)));
  }
  Tensor loss = Tensor::scalar(static_cast<float>(total / static_cast<double>(std::max<std::int64_t>(n, 1))));
  autograd::record(loss, "binary_cross_entropy_with_logits", {logits, target}, [x, y, n](const Tensor& g) {
    Tensor dx = Tensor::empty(x.shape()), dy = Tensor::empty(x.shape());
    const float scale = g.item() / static_cast<float>(std::max<std::int64_t>(n, 1));
    for (std::int64_t i = 0; i < n; ++i) {
      const float xi = x.data()[i];
      dx.data()[i] = (1.0f / (1.0f + std::exp(-xi)) - y.data()[i]) * scale;
      dy.data()[i] = -xi * scale;
    }
    return std::vector<Tensor>{dx, dy};
  });
  return loss;
}

}  // namespace cpudl
