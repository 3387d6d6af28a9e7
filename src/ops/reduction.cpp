// Reductions over dimensions: the reduced dims are moved last (one transposing copy when they
// are not already) and each row is reduced by the native kernel.
#include <algorithm>
#include <numeric>

#include "ops/op_helpers.h"
#include "runtime/op_profile.h"

namespace cpudl {
using namespace ops_detail;

namespace {

struct ReducePlan {
  std::vector<std::int64_t> kept, reduced;  // dims, in order
  Shape out_shape, keepdim_shape;
  std::int64_t rows = 1, cols = 1;
};

ReducePlan plan(const Shape& shape, std::vector<std::int64_t> dims) {
  const auto nd = static_cast<std::int64_t>(shape.size());
  ReducePlan p;
  std::vector<bool> reduce(shape.size(), dims.empty());
  for (std::int64_t d : dims) {
    const std::int64_t nd_d = normalize_dim(d, nd);
    if (nd > 0) reduce[static_cast<std::size_t>(nd_d)] = true;
  }
  for (std::int64_t d = 0; d < nd; ++d) {
    const auto du = static_cast<std::size_t>(d);
    if (reduce[du]) {
      p.reduced.push_back(d);
      p.cols *= shape[du];
      p.keepdim_shape.push_back(1);
    } else {
      p.kept.push_back(d);
      p.rows *= shape[du];
      p.out_shape.push_back(shape[du]);
      p.keepdim_shape.push_back(shape[du]);
    }
  }
  return p;
}

// x with the reduced dims last, as a contiguous [rows, cols] buffer.
Tensor rows_last(const Tensor& x, const ReducePlan& p) {
  NoGradGuard no_grad;
  std::vector<std::int64_t> order = p.kept;
  order.insert(order.end(), p.reduced.begin(), p.reduced.end());
  return x.permute(order).contiguous();
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  profiling::Scope profile("sum");
  require_f32(x, "sum", "input");
  const ReducePlan p = plan(x.shape(), std::move(dims));
  const Tensor xr = rows_last(x, p);
  Tensor out = Tensor::empty(keepdim ? p.keepdim_shape : p.out_shape);
  const auto sum_fn = native().f32_sum.fn;
  const float* in = xr.data();
  float* o = out.data();
  if (p.rows == 1) {
    // One long row: split it across the pool and add the partial sums.
    std::vector<double> partial(64, 0.0);
    parallel_for(static_cast<std::size_t>(p.cols), kGrain, std::min(64, compute_threads()),
                 [&](std::size_t b, std::size_t e) {
                   partial[static_cast<std::size_t>(omp_get_thread_num())] = sum_fn(in + b, e - b);
                 });
    o[0] = static_cast<float>(std::accumulate(partial.begin(), partial.end(), 0.0));
  } else {
    parallel_for(
        static_cast<std::size_t>(p.rows),
        std::max<std::size_t>(1, kGrain / static_cast<std::size_t>(std::max<std::int64_t>(p.cols, 1))),
        [&](std::size_t b, std::size_t e) {
          for (std::size_t r = b; r < e; ++r)
            o[r] = sum_fn(in + r * static_cast<std::size_t>(p.cols), static_cast<std::size_t>(p.cols));
        });
  }
  const Shape in_shape = x.shape(), keep_shape = p.keepdim_shape;
  autograd::record(out, "sum", {x}, [in_shape, keep_shape](const Tensor& g) {
    return std::vector<Tensor>{g.reshape(keep_shape).expand(in_shape).contiguous()};
  });
  return out;
}

Tensor mean(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  profiling::Scope profile("mean");
  const ReducePlan p = plan(x.shape(), dims);
  return mul(sum(x, std::move(dims), keepdim), 1.0f / static_cast<float>(std::max<std::int64_t>(p.cols, 1)));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  profiling::Scope profile("sum_to");
  const Shape& from = x.shape();
  if (shape.size() > from.size())
    throw Error("sum_to: cannot reduce " + shape_text(from) + " to " + shape_text(shape));
  const std::size_t lead = from.size() - shape.size();
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<std::int64_t>(i));
    } else if (shape[i - lead] == 1 && from[i] != 1) {
      dims.push_back(static_cast<std::int64_t>(i));
    } else if (shape[i - lead] != from[i]) {
      throw Error("sum_to: cannot reduce " + shape_text(from) + " to " + shape_text(shape));
    }
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

namespace {
// Per-row max value and first index of the maximum along `dim`.
std::pair<Tensor, std::vector<std::int64_t>> max_along(const Tensor& x, std::int64_t dim, bool keepdim,
                                                       Shape* keep_shape) {
  const ReducePlan p = plan(x.shape(), {dim});
  if (p.cols == 0) throw Error("max/argmax over an empty dimension of shape " + shape_text(x.shape()));
  const Tensor xr = rows_last(x, p);
  Tensor values = Tensor::empty(keepdim ? p.keepdim_shape : p.out_shape);
  std::vector<std::int64_t> index(static_cast<std::size_t>(p.rows));
  const auto argmax_fn = native().f32_argmax.fn;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* row = xr.data() + r * p.cols;
    const std::size_t i = argmax_fn(row, static_cast<std::size_t>(p.cols));
    index[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(i);
    values.data()[r] = row[i];
  }
  if (keep_shape) *keep_shape = p.keepdim_shape;
  return {values, index};
}
}  // namespace

Tensor max(const Tensor& x, std::int64_t dim, bool keepdim) {
  profiling::Scope profile("max");
  require_f32(x, "max", "input");
  Shape keep_shape;
  auto [values, index] = max_along(x, dim, keepdim, &keep_shape);
  const Shape in_shape = x.shape();
  const std::int64_t d = normalize_dim(dim, x.dim());
  autograd::record(values, "max", {x}, [in_shape, d, index = std::move(index)](const Tensor& g) {
    // Scatter each row's gradient to the position of its maximum.
    Tensor dx = Tensor::zeros(in_shape);
    const Tensor gc = contiguous_values(g);
    std::int64_t inner = 1;
    for (std::size_t k = static_cast<std::size_t>(d) + 1; k < in_shape.size(); ++k) inner *= in_shape[k];
    const std::int64_t size = in_shape[static_cast<std::size_t>(d)];
    for (std::size_t r = 0; r < index.size(); ++r) {
      const auto ri = static_cast<std::int64_t>(r);
      const std::int64_t outer = ri / inner, in = ri % inner;
      dx.data()[(outer * size + index[r]) * inner + in] = gc.data()[r];
    }
    return std::vector<Tensor>{dx};
  });
  return values;
}

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  profiling::Scope profile("argmax");
  require_f32(x, "argmax", "input");
  auto [values, index] = max_along(x, dim, keepdim, nullptr);
  return Tensor::from_buffer(index.data(), values.shape(), DType::i64);
}

}  // namespace cpudl
