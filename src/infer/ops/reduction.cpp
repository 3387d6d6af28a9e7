// Reductions over axes: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd (float and integer:
// exported graphs reduce shapes with ReduceProd), and ArgMax/ArgMin. The reduced elements of each
// output are enumerated once at build time as offsets, so a run is a gather per output element.
#include <cmath>
#include <limits>

#include "infer/op_registry.h"
#include "runtime/parallel.h"

namespace cpudl::infer {
namespace {

enum class Reduce { mean, sum, max, min, prod };

// Offsets (in elements of x) of each output's first input, and of the reduced elements after it.
struct ReductionPlan {
  std::vector<std::int64_t> bases, inner;
};

ReductionPlan plan_reduction(const Shape& x, const std::vector<bool>& reduced) {
  std::vector<std::int64_t> strides(x.size(), 1);
  for (std::size_t d = x.size(); d-- > 1;) strides[d - 1] = strides[d] * x[d];
  auto enumerate = [&](bool want_reduced) {
    std::vector<std::int64_t> offsets = {0};
    for (std::size_t d = 0; d < x.size(); ++d) {
      if (reduced[d] != want_reduced) continue;
      std::vector<std::int64_t> next;
      next.reserve(offsets.size() * static_cast<std::size_t>(x[d]));
      for (std::int64_t base : offsets)
        for (std::int64_t i = 0; i < x[d]; ++i) next.push_back(base + i * strides[d]);
      offsets.swap(next);
    }
    return offsets;
  };
  return ReductionPlan{enumerate(false), enumerate(true)};
}

Shape reduced_shape(const Shape& x, const std::vector<bool>& reduced, bool keep) {
  Shape out;
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d])
      out.push_back(x[d]);
    else if (keep)
      out.push_back(1);
  }
  return out;
}

// The input's element type, when one a reduction runs on.
DType require_numeric(const OpSetup& s) {
  const DType t = s.inputs[0].dtype;
  if (t != DType::f32 && t != DType::i64 && t != DType::i32)
    s.fail("element type " + std::string(dtype_name(t)) + " is not supported (FLOAT, INT64, INT32 are)");
  return t;
}

template <Reduce kind>
Kernel build_reduce(OpSetup& s) {
  s.require_inputs(1, 2);
  const DType t = require_numeric(s);
  if (kind == Reduce::mean && t != DType::f32) s.fail("ReduceMean needs a FLOAT input");
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  // axes: an attribute up to opset 17 (an input from 13 for ReduceSum, 18 for the others)
  std::vector<std::int64_t> axes = s.has(1) ? s.constant(1, "axes").as_int64() : s.node.get_ints("axes");
  const bool keep = s.node.get_int("keepdims", 1) != 0;
  const bool none = axes.empty() && s.node.get_int("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(x.size(), axes.empty() && !none);
  for (std::int64_t a : axes) reduced[static_cast<std::size_t>(normalize_axis(s, a, rank, "axes"))] = true;
  s.set_output(0, t, reduced_shape(x, reduced, keep));
  auto plan = std::make_shared<ReductionPlan>(plan_reduction(x, reduced));
  if (kind == Reduce::max || kind == Reduce::min)
    for (std::size_t d = 0; d < x.size(); ++d)
      if (reduced[d] && x[d] == 0 && !s.shape_pass)
        s.fail("reduces an empty axis " + std::to_string(d) + " of " + shape_text(x) +
               " (no maximum or minimum)");
  return [plan, t](std::span<const TensorView> in, std::span<const TensorView> out) {
    auto run = [&](auto tag) {
      using T = decltype(tag);
      using Acc = std::conditional_t<std::is_same_v<T, float>, float, std::int64_t>;
      const T* src = static_cast<const T*>(in[0].data);
      T* dst = static_cast<T*>(out[0].data);
      const auto& inner = plan->inner;
      parallel_for(plan->bases.size(),
                   std::max<std::size_t>(1, 16384 / std::max<std::size_t>(1, inner.size())),
                   [&](std::size_t b, std::size_t e) {
                     for (std::size_t i = b; i < e; ++i) {
                       const T* p = src + plan->bases[i];
                       Acc acc = kind == Reduce::prod  ? Acc(1)
                                 : kind == Reduce::max ? std::numeric_limits<Acc>::lowest()
                                 : kind == Reduce::min ? std::numeric_limits<Acc>::max()
                                                       : Acc(0);
                       for (std::int64_t off : inner) {
                         const Acc v = static_cast<Acc>(p[off]);
                         if constexpr (kind == Reduce::max)
                           acc = std::isnan(static_cast<double>(v)) || v > acc ? v : acc;
                         else if constexpr (kind == Reduce::min)
                           acc = std::isnan(static_cast<double>(v)) || v < acc ? v : acc;
                         else if constexpr (kind == Reduce::prod)
                           acc *= v;
                         else
                           acc += v;
                       }
                       if constexpr (kind == Reduce::mean) acc /= static_cast<Acc>(inner.size());
                       dst[i] = static_cast<T>(acc);
                     }
                   });
    };
    if (t == DType::f32)
      run(float{});
    else if (t == DType::i64)
      run(std::int64_t{});
    else
      run(std::int32_t{});
  };
}

// ArgMax/ArgMin: the first index of the extreme along one axis (the last with select_last_index),
// as int64.
template <bool max>
Kernel build_arg_extreme(OpSetup& s) {
  s.require_inputs(1, 1);
  const DType t = require_numeric(s);
  const Shape& x = s.shape(0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const auto axis = static_cast<std::size_t>(normalize_axis(s, s.node.get_int("axis", 0), rank, "axis"));
  const bool keep = s.node.get_int("keepdims", 1) != 0, last = s.node.get_int("select_last_index", 0) != 0;
  std::vector<bool> reduced(x.size(), false);
  reduced[axis] = true;
  s.set_output(0, DType::i64, reduced_shape(x, reduced, keep));
  if (x[axis] == 0 && !s.shape_pass)
    s.fail("axis " + std::to_string(axis) + " of " + shape_text(x) + " is empty");
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= x[d];
  for (std::size_t d = axis + 1; d < x.size(); ++d) inner *= x[d];
  const std::int64_t n = x[axis];
  return [t, outer, inner, n, last](std::span<const TensorView> in, std::span<const TensorView> out) {
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* src = static_cast<const T*>(in[0].data);
      auto* dst = static_cast<std::int64_t*>(out[0].data);
      parallel_for(static_cast<std::size_t>(outer), 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t o = b; o < e; ++o)
          for (std::int64_t i = 0; i < inner; ++i) {
            const T* p = src + static_cast<std::int64_t>(o) * n * inner + i;
            std::int64_t best = 0;
            for (std::int64_t k = 1; k < n; ++k) {
              const T v = p[k * inner], b0 = p[best * inner];
              const bool better = max ? (v > b0 || (last && v == b0)) : (v < b0 || (last && v == b0));
              if (better) best = k;
            }
            dst[static_cast<std::int64_t>(o) * inner + i] = best;
          }
      });
    };
    if (t == DType::f32)
      run(float{});
    else if (t == DType::i64)
      run(std::int64_t{});
    else
      run(std::int32_t{});
  };
}

const OpEntry kOps[] = {
    {"ReduceMean", build_reduce<Reduce::mean>}, {"ReduceSum", build_reduce<Reduce::sum>},
    {"ReduceMax", build_reduce<Reduce::max>},   {"ReduceMin", build_reduce<Reduce::min>},
    {"ReduceProd", build_reduce<Reduce::prod>}, {"ArgMax", build_arg_extreme<true>},
    {"ArgMin", build_arg_extreme<false>},
};

}  // namespace

std::span<const OpEntry> reduction_ops() { return kOps; }

}  // namespace cpudl::infer
