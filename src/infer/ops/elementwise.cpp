// Elementwise operators: NumPy-broadcasting binary ops (Add, Sub, Mul, Div, Pow and the
// comparisons Equal, Greater, Less, GreaterOrEqual, LessOrEqual), Where,
// the activations (through the native kernel table where one exists), and Cast. Broadcasting is
// planned once per shape: dimensions are merged, and each run walks precomputed offsets of
// contiguous inner blocks, so the inner loop is a native kernel or a scalar-broadcast loop.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "infer/op_registry.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "runtime/parallel.h"

namespace cpudl::infer {
namespace {

constexpr std::size_t kGrain = 16384;

const kernels::KernelTable& native() { return kernels::kernel_table(); }

// Offsets of each contiguous inner block of a broadcast over `out`: inner block length `inner`,
// and for a and b whether their inner block is contiguous (stride 1) or one repeated element.
struct BroadcastPlan {
  std::int64_t inner = 1;
  bool a_inner_full = true, b_inner_full = true;
  std::vector<std::int64_t> a_offsets, b_offsets;  // per outer block, in elements
};

BroadcastPlan plan_broadcast(const Shape& out, const Shape& a, const Shape& b) {
  const std::size_t rank = out.size();
  auto strides_for = [&](const Shape& s) {
    std::vector<std::int64_t> st(rank, 0);
    std::int64_t step = 1;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::size_t d = s.size() - 1 - i, o = rank - 1 - i;
      st[o] = s[d] == 1 ? 0 : step;
      step *= s[d];
    }
    return st;
  };
  std::vector<std::int64_t> sa = strides_for(a), sb = strides_for(b);
  // Merge dims (from the inside out) while both operands keep one pattern.
  std::vector<std::int64_t> dims, da, db;
  for (std::size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    if (!dims.empty()) {
      const std::size_t j = dims.size() - 1;
      auto merges = [&](std::int64_t prev, std::int64_t cur) {
        return (prev == 0 && cur == 0) || (prev != 0 && cur != 0 && prev == cur * out[i]);
      };
      if (merges(da[j], sa[i]) && merges(db[j], sb[i])) {
        dims[j] *= out[i];
        da[j] = sa[i];
        db[j] = sb[i];
        continue;
      }
    }
    dims.push_back(out[i]);
    da.push_back(sa[i]);
    db.push_back(sb[i]);
  }
  BroadcastPlan p;
  if (dims.empty()) {  // a single element
    p.a_offsets = {0};
    p.b_offsets = {0};
    return p;
  }
  p.inner = dims.back();
  p.a_inner_full = da.back() != 0;
  p.b_inner_full = db.back() != 0;
  std::int64_t outer = 1;
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) outer *= dims[i];
  p.a_offsets.resize(static_cast<std::size_t>(outer));
  p.b_offsets.resize(static_cast<std::size_t>(outer));
  std::vector<std::int64_t> index(dims.size(), 0);
  for (std::int64_t o = 0; o < outer; ++o) {
    std::int64_t oa = 0, ob = 0;
    for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
      oa += index[i] * da[i];
      ob += index[i] * db[i];
    }
    p.a_offsets[static_cast<std::size_t>(o)] = oa;
    p.b_offsets[static_cast<std::size_t>(o)] = ob;
    for (std::size_t i = dims.size() - 1; i-- > 0;) {
      if (++index[i] < dims[i]) break;
      index[i] = 0;
    }
  }
  return p;
}

template <class T, class R, class Op>
void run_broadcast(const BroadcastPlan& p, const T* a, const T* b, R* out, Op op,
                   void (*vector_kernel)(const float*, const float*, float*, std::size_t)) {
  const std::int64_t inner = p.inner;
  const std::size_t outer = p.a_offsets.size();
  if (inner == 0) return;  // an empty value
  parallel_for(outer, std::max<std::size_t>(1, kGrain / static_cast<std::size_t>(inner)),
               [&](std::size_t begin, std::size_t end) {
                 for (std::size_t o = begin; o < end; ++o) {
                   const T* pa = a + p.a_offsets[o];
                   const T* pb = b + p.b_offsets[o];
                   R* po = out + static_cast<std::int64_t>(o) * inner;
                   if constexpr (std::is_same_v<T, float> && std::is_same_v<R, float>) {
                     if (vector_kernel && p.a_inner_full && p.b_inner_full) {
                       vector_kernel(pa, pb, po, static_cast<std::size_t>(inner));
                       continue;
                     }
                   }
                   if (p.a_inner_full && p.b_inner_full) {
                     for (std::int64_t i = 0; i < inner; ++i) po[i] = op(pa[i], pb[i]);
                   } else if (p.a_inner_full) {
                     const T vb = *pb;
                     for (std::int64_t i = 0; i < inner; ++i) po[i] = op(pa[i], vb);
                   } else if (p.b_inner_full) {
                     const T va = *pa;
                     for (std::int64_t i = 0; i < inner; ++i) po[i] = op(va, pb[i]);
                   } else {
                     const R v = op(*pa, *pb);
                     for (std::int64_t i = 0; i < inner; ++i) po[i] = v;
                   }
                 }
               });
}

enum class Binary { add, sub, mul, div, pow, equal, greater, less, greater_equal, less_equal };

// The comparisons write BOOL (int8 0/1).
constexpr bool is_comparison(Binary kind) { return kind >= Binary::equal; }

template <Binary kind, class T>
bool compare(T x, T y) {
  if constexpr (kind == Binary::equal) return x == y;
  if constexpr (kind == Binary::greater) return x > y;
  if constexpr (kind == Binary::less) return x < y;
  if constexpr (kind == Binary::greater_equal) return x >= y;
  return x <= y;
}

template <Binary kind>
Kernel build_binary(OpSetup& s) {
  s.require_inputs(2, 2);
  const DType t = s.inputs[0].dtype;
  if (t != s.inputs[1].dtype)
    s.fail("inputs have different element types (" + std::string(dtype_name(t)) + ", " +
           std::string(dtype_name(s.inputs[1].dtype)) + ")");
  if (t != DType::f32 && t != DType::i64 && t != DType::i32)
    s.fail("element type " + std::string(dtype_name(t)) + " is not supported");
  if (kind == Binary::pow && t != DType::f32) s.fail("Pow needs float inputs");
  const Shape out = broadcast_shapes(s, s.shape(0), s.shape(1));
  s.set_output(0, is_comparison(kind) ? DType::i8 : t, out);
  auto plan = std::make_shared<BroadcastPlan>(plan_broadcast(out, s.shape(0), s.shape(1)));
  auto op = [](auto x, auto y) {
    using V = decltype(x);
    if constexpr (kind == Binary::add)
      return static_cast<V>(x + y);
    else if constexpr (kind == Binary::sub)
      return static_cast<V>(x - y);
    else if constexpr (kind == Binary::mul)
      return static_cast<V>(x * y);
    else if constexpr (kind == Binary::div)
      return static_cast<V>(y == 0 && !std::is_floating_point_v<V> ? 0 : x / y);
    else if constexpr (kind == Binary::pow)
      return static_cast<V>(std::pow(x, y));
    else
      return static_cast<V>(compare<kind>(x, y));
  };
  void (*vector_kernel)(const float*, const float*, float*, std::size_t) = nullptr;
  if constexpr (kind == Binary::add) vector_kernel = native().f32_add.fn;
  if constexpr (kind == Binary::sub) vector_kernel = native().f32_sub.fn;
  if constexpr (kind == Binary::mul) vector_kernel = native().f32_mul.fn;
  if constexpr (kind == Binary::div) vector_kernel = native().f32_div.fn;
  return [plan, t, op, vector_kernel](std::span<const TensorView> in, std::span<const TensorView> out) {
    auto dispatch = [&](auto tag) {
      using T = decltype(tag);
      const T* a = static_cast<const T*>(in[0].data);
      const T* b = static_cast<const T*>(in[1].data);
      if constexpr (is_comparison(kind)) {
        run_broadcast(
            *plan, a, b, static_cast<std::int8_t*>(out[0].data),
            [](T x, T y) { return static_cast<std::int8_t>(compare<kind>(x, y)); }, nullptr);
      } else {
        run_broadcast(*plan, a, b, static_cast<T*>(out[0].data), op, vector_kernel);
      }
    };
    if (t == DType::f32)
      dispatch(float{});
    else if (t == DType::i64)
      dispatch(std::int64_t{});
    else
      dispatch(std::int32_t{});
  };
}

Kernel build_where(OpSetup& s) {
  s.require_inputs(3, 3);
  if (s.inputs[0].dtype != DType::i8) s.fail("condition must be BOOL");
  if (s.inputs[1].dtype != s.inputs[2].dtype) s.fail("X and Y have different element types");
  const Shape xy = broadcast_shapes(s, s.shape(1), s.shape(2));
  const Shape out = broadcast_shapes(s, s.shape(0), xy);
  const DType t = s.inputs[1].dtype;
  s.set_output(0, t, out);
  // Three-way broadcasting, element by element through precomputed index maps (Where only
  // appears on masks in exported graphs, never on a hot path).
  auto index_map = [&](const Shape& in) {
    const BroadcastPlan p = plan_broadcast(out, in, out);
    std::vector<std::int64_t> map;
    map.reserve(static_cast<std::size_t>(shape_numel(out)));
    for (std::size_t o = 0; o < p.a_offsets.size(); ++o)
      for (std::int64_t i = 0; i < p.inner; ++i) map.push_back(p.a_offsets[o] + (p.a_inner_full ? i : 0));
    return map;
  };
  auto maps =
      std::make_shared<std::array<std::vector<std::int64_t>, 3>>(std::array<std::vector<std::int64_t>, 3>{
          index_map(s.shape(0)), index_map(s.shape(1)), index_map(s.shape(2))});
  const std::size_t size = dtype_size(t);
  return [maps, size](std::span<const TensorView> in, std::span<const TensorView> out) {
    const auto* c = static_cast<const std::int8_t*>(in[0].data);
    const auto* x = static_cast<const std::byte*>(in[1].data);
    const auto* y = static_cast<const std::byte*>(in[2].data);
    auto* o = static_cast<std::byte*>(out[0].data);
    const auto& [mc, mx, my] = *maps;
    for (std::size_t i = 0; i < mc.size(); ++i) {
      const std::byte* src = c[mc[i]] ? x + mx[i] * size : y + my[i] * size;
      std::memcpy(o + i * size, src, size);
    }
  };
}

// Unary float activations: a native kernel when the table has one, else a scalar function.
// Inputs after the first (Clip's bounds) are the caller's to read at build time.
Kernel unary(OpSetup& s, void (*vector_kernel)(const float*, float*, std::size_t),
             float (*scalar)(float, const float*), std::array<float, 2> params = {0, 0},
             std::size_t max_inputs = 1) {
  s.require_inputs(1, max_inputs);
  s.require_f32(0);
  s.set_output(0, DType::f32, s.shape(0));
  const auto n = static_cast<std::size_t>(s.inputs[0].numel());
  return [n, vector_kernel, scalar, params](std::span<const TensorView> in, std::span<const TensorView> out) {
    const float* x = in[0].f32();
    float* y = out[0].f32();
    parallel_for(n, kGrain, [&](std::size_t b, std::size_t e) {
      if (vector_kernel) {
        vector_kernel(x + b, y + b, e - b);
      } else {
        for (std::size_t i = b; i < e; ++i) y[i] = scalar(x[i], params.data());
      }
    });
  };
}

Kernel build_relu(OpSetup& s) { return unary(s, native().f32_relu.fn, nullptr); }
Kernel build_sigmoid(OpSetup& s) { return unary(s, native().f32_sigmoid.fn, nullptr); }
Kernel build_tanh(OpSetup& s) { return unary(s, native().f32_tanh.fn, nullptr); }
Kernel build_exp(OpSetup& s) { return unary(s, native().f32_exp.fn, nullptr); }
Kernel build_log(OpSetup& s) { return unary(s, native().f32_log.fn, nullptr); }
Kernel build_erf(OpSetup& s) {
  return unary(s, nullptr, [](float x, const float*) { return std::erf(x); });
}
Kernel build_sqrt(OpSetup& s) {
  return unary(s, nullptr, [](float x, const float*) { return std::sqrt(x); });
}
Kernel build_neg(OpSetup& s) {
  if (s.count() == 1 && s.inputs[0].dtype == DType::i64) {
    s.set_output(0, DType::i64, s.shape(0));
    return [](std::span<const TensorView> in, std::span<const TensorView> out) {
      const auto n = shape_numel(*in[0].shape);
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::int64_t*>(out[0].data)[i] = -static_cast<const std::int64_t*>(in[0].data)[i];
    };
  }
  return unary(s, nullptr, [](float x, const float*) { return -x; });
}
Kernel build_gelu(OpSetup& s) {
  const std::string approximate = s.node.get_string("approximate", "none");
  if (approximate == "tanh")
    return unary(s, nullptr, [](float x, const float*) {
      return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
    });
  if (approximate != "none") s.fail("approximate='" + approximate + "' is not 'none' or 'tanh'");
  return unary(s, native().f32_gelu.fn, nullptr);
}
Kernel build_abs(OpSetup& s) {
  return unary(s, nullptr, [](float x, const float*) { return std::fabs(x); });
}
Kernel build_reciprocal(OpSetup& s) {
  return unary(s, nullptr, [](float x, const float*) { return 1.0f / x; });
}
Kernel build_ceil(OpSetup& s) {
  return unary(s, nullptr, [](float x, const float*) { return std::ceil(x); });
}
Kernel build_floor(OpSetup& s) {
  return unary(s, nullptr, [](float x, const float*) { return std::floor(x); });
}
Kernel build_hard_sigmoid(OpSetup& s) {
  const float alpha = s.node.get_float("alpha", 0.2f), beta = s.node.get_float("beta", 0.5f);
  return unary(s, nullptr, [](float x, const float* p) { return std::clamp(p[0] * x + p[1], 0.0f, 1.0f); },
               {alpha, beta});
}
// x * HardSigmoid(x) with alpha 1/6, beta 1/2 (ONNX's definition; torch.nn.Hardswish exports it)
Kernel build_hard_swish(OpSetup& s) {
  return unary(s, nullptr, [](float x, const float*) { return x * std::clamp(x / 6.0f + 0.5f, 0.0f, 1.0f); });
}
Kernel build_leaky_relu(OpSetup& s) {
  const float alpha = s.node.get_float("alpha", 0.01f);
  return unary(s, nullptr, [](float x, const float* p) { return x >= 0 ? x : x * p[0]; }, {alpha, 0});
}
Kernel build_clip(OpSetup& s) {
  s.require_inputs(1, 3);
  float lo = -INFINITY, hi = INFINITY;
  if (s.opset < 11 || s.node.has("min") || s.node.has("max")) {
    lo = s.node.get_float("min", lo);
    hi = s.node.get_float("max", hi);
  }
  if (s.has(1)) lo = s.constant(1, "min").as_float().at(0);
  if (s.has(2)) hi = s.constant(2, "max").as_float().at(0);
  return unary(
      s, nullptr, [](float x, const float* p) { return std::min(std::max(x, p[0]), p[1]); }, {lo, hi}, 3);
}

Kernel build_cast(OpSetup& s) {
  s.require_inputs(1, 1);
  const std::int64_t to = s.node.get_int("to", 0);
  DType t;
  switch (to) {
    case 1:
      t = DType::f32;
      break;  // FLOAT
    case 2:
      t = DType::u8;
      break;  // UINT8
    case 3:
      t = DType::i8;
      break;  // INT8
    case 6:
      t = DType::i32;
      break;  // INT32
    case 7:
      t = DType::i64;
      break;  // INT64
    case 9:
      t = DType::i8;
      break;  // BOOL
    default:
      s.fail("cast to ONNX type " + std::to_string(to) +
             " is not supported (FLOAT, UINT8, INT8, INT32, INT64, BOOL are)");
  }
  const DType from = s.inputs[0].dtype;  // bf16 too: weights `cpudl quantize --mode bf16` stores
  const bool to_bool = to == 9;
  s.set_output(0, t, s.shape(0));
  return [from, t, to_bool](std::span<const TensorView> in, std::span<const TensorView> out) {
    const std::int64_t n = shape_numel(*in[0].shape);
    auto read = [&](std::int64_t i) -> double {
      switch (from) {
        case DType::f32:
          return static_cast<const float*>(in[0].data)[i];
        case DType::i64:
          return static_cast<double>(static_cast<const std::int64_t*>(in[0].data)[i]);
        case DType::i32:
          return static_cast<const std::int32_t*>(in[0].data)[i];
        case DType::u8:
          return static_cast<const std::uint8_t*>(in[0].data)[i];
        case DType::bf16:
          return bf16_to_f32(static_cast<const std::uint16_t*>(in[0].data)[i]);
        default:
          return static_cast<const std::int8_t*>(in[0].data)[i];
      }
    };
    // Integer targets keep the low bits of the truncated value (as C's conversions through
    // int64 do); ONNX leaves out-of-range casts undefined.
    for (std::int64_t i = 0; i < n; ++i) {
      double v = read(i);
      if (to_bool) v = v != 0;
      switch (t) {
        case DType::f32:
          static_cast<float*>(out[0].data)[i] = static_cast<float>(v);
          break;
        case DType::i64:
          static_cast<std::int64_t*>(out[0].data)[i] = static_cast<std::int64_t>(v);
          break;
        case DType::i32:
          static_cast<std::int32_t*>(out[0].data)[i] =
              static_cast<std::int32_t>(static_cast<std::int64_t>(v));
          break;
        case DType::u8:
          static_cast<std::uint8_t*>(out[0].data)[i] =
              static_cast<std::uint8_t>(static_cast<std::int64_t>(v));
          break;
        default:
          static_cast<std::int8_t*>(out[0].data)[i] = static_cast<std::int8_t>(static_cast<std::int64_t>(v));
          break;
      }
    }
  };
}

const OpEntry kOps[] = {
    {"Add", build_binary<Binary::add>},
    {"Sub", build_binary<Binary::sub>},
    {"Mul", build_binary<Binary::mul>},
    {"Div", build_binary<Binary::div>},
    {"Pow", build_binary<Binary::pow>},
    {"Equal", build_binary<Binary::equal>},
    {"Greater", build_binary<Binary::greater>},
    {"Less", build_binary<Binary::less>},
    {"GreaterOrEqual", build_binary<Binary::greater_equal>},
    {"LessOrEqual", build_binary<Binary::less_equal>},
    {"Ceil", build_ceil},
    {"Reciprocal", build_reciprocal},
    {"Abs", build_abs},
    {"Floor", build_floor},
    {"HardSigmoid", build_hard_sigmoid},
    {"HardSwish", build_hard_swish},
    {"Where", build_where},
    {"Relu", build_relu},
    {"LeakyRelu", build_leaky_relu},
    {"Clip", build_clip},
    {"Sigmoid", build_sigmoid},
    {"Tanh", build_tanh},
    {"Erf", build_erf},
    {"Gelu", build_gelu},
    {"Sqrt", build_sqrt},
    {"Exp", build_exp},
    {"Log", build_log},
    {"Neg", build_neg},
    {"Cast", build_cast},
};

}  // namespace

std::span<const OpEntry> elementwise_ops() { return kOps; }

}  // namespace cpudl::infer
