// Elementwise operators over broadcast inputs of any element type, as detectors' box arithmetic
// and masks use them: Max and Min (any number of inputs), Mod, And, Or, Xor, Not. They run on
// small tensors (boxes, masks), so broadcasting is planned as one index map per input.
#include <cmath>
#include <cstring>

#include "infer/op_registry.h"

namespace cpudl::infer {
namespace {

// For each element of `out`, the element of an input of shape `in` (NumPy broadcasting) it reads.
std::vector<std::int64_t> index_map(const Shape& out, const Shape& in) {
  const std::size_t rank = out.size();
  std::vector<std::int64_t> strides(rank, 0);
  std::int64_t step = 1;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::size_t d = in.size() - 1 - i, o = rank - 1 - i;
    strides[o] = in[d] == 1 ? 0 : step;
    step *= in[d];
  }
  const std::int64_t n = shape_numel(out);
  std::vector<std::int64_t> map(static_cast<std::size_t>(n));
  std::vector<std::int64_t> index(rank, 0);
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t at = 0;
    for (std::size_t d = 0; d < rank; ++d) at += index[d] * strides[d];
    map[static_cast<std::size_t>(e)] = at;
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < out[d]) break;
      index[d] = 0;
    }
  }
  return map;
}

enum class Nary { max, min, mod, logical_and, logical_or, logical_xor };

template <Nary kind>
Kernel build_nary(OpSetup& s) {
  constexpr bool logical = kind == Nary::logical_and || kind == Nary::logical_or || kind == Nary::logical_xor;
  if (kind == Nary::max || kind == Nary::min)
    s.require_inputs(1, 64);
  else
    s.require_inputs(2, 2);
  const DType t = s.inputs[0].dtype;
  Shape out = s.shape(0);
  for (std::size_t i = 1; i < s.count(); ++i) {
    if (s.inputs[i].dtype != t)
      s.fail("inputs have different element types (" + std::string(dtype_name(t)) + ", " +
             std::string(dtype_name(s.inputs[i].dtype)) + ")");
    out = broadcast_shapes(s, out, s.shape(i));
  }
  if (logical && t != DType::i8) s.fail("inputs must be BOOL");
  if (!logical && t != DType::f32 && t != DType::i64 && t != DType::i32)
    s.fail("element type " + std::string(dtype_name(t)) + " is not supported (FLOAT, INT64, INT32 are)");
  const bool fmod = s.node.get_int("fmod", 0) != 0;
  if (kind == Nary::mod && t == DType::f32 && !fmod) s.fail("a FLOAT Mod needs fmod = 1 (ONNX's rule)");
  s.set_output(0, t, out);
  auto maps = std::make_shared<std::vector<std::vector<std::int64_t>>>();
  for (std::size_t i = 0; i < s.count(); ++i) maps->push_back(index_map(out, s.shape(i)));
  const std::string label = s.node.label();
  return [maps, t, fmod, label](std::span<const TensorView> in, std::span<const TensorView> o) {
    auto run = [&](auto tag) {
      using T = decltype(tag);
      T* dst = static_cast<T*>(o[0].data);
      const std::size_t n = (*maps)[0].size();
      for (std::size_t e = 0; e < n; ++e) {
        T acc = static_cast<const T*>(in[0].data)[(*maps)[0][e]];
        for (std::size_t i = 1; i < maps->size(); ++i) {
          const T v = static_cast<const T*>(in[i].data)[(*maps)[i][e]];
          if constexpr (kind == Nary::max) {
            if constexpr (std::is_floating_point_v<T>)
              acc = std::isnan(acc) || std::isnan(v) ? NAN : (v > acc ? v : acc);
            else
              acc = v > acc ? v : acc;
          } else if constexpr (kind == Nary::min) {
            if constexpr (std::is_floating_point_v<T>)
              acc = std::isnan(acc) || std::isnan(v) ? NAN : (v < acc ? v : acc);
            else
              acc = v < acc ? v : acc;
          } else if constexpr (kind == Nary::mod) {
            if constexpr (std::is_floating_point_v<T>) {
              acc = std::fmod(acc, v);
            } else {
              if (v == 0) throw Error(label + ": integer division by zero");
              T r = static_cast<T>(acc % v);
              if (!fmod && r != 0 && ((r < 0) != (v < 0))) r = static_cast<T>(r + v);  // the divisor's sign
              acc = r;
            }
          } else if constexpr (kind == Nary::logical_and) {
            acc = static_cast<T>(acc != 0 && v != 0);
          } else if constexpr (kind == Nary::logical_or) {
            acc = static_cast<T>(acc != 0 || v != 0);
          } else {
            acc = static_cast<T>((acc != 0) != (v != 0));
          }
        }
        dst[e] = acc;
      }
    };
    if (t == DType::f32)
      run(float{});
    else if (t == DType::i64)
      run(std::int64_t{});
    else if (t == DType::i32)
      run(std::int32_t{});
    else
      run(std::int8_t{});
  };
}

Kernel build_not(OpSetup& s) {
  s.require_inputs(1, 1);
  if (s.inputs[0].dtype != DType::i8) s.fail("input must be BOOL");
  s.set_output(0, DType::i8, s.shape(0));
  return [](std::span<const TensorView> in, std::span<const TensorView> o) {
    const std::int64_t n = shape_numel(*in[0].shape);
    for (std::int64_t i = 0; i < n; ++i)
      static_cast<std::int8_t*>(o[0].data)[i] =
          static_cast<std::int8_t>(static_cast<const std::int8_t*>(in[0].data)[i] == 0);
  };
}

const OpEntry kOps[] = {
    {"Max", build_nary<Nary::max>},
    {"Min", build_nary<Nary::min>},
    {"Mod", build_nary<Nary::mod>},
    {"And", build_nary<Nary::logical_and>},
    {"Or", build_nary<Nary::logical_or>},
    {"Xor", build_nary<Nary::logical_xor>},
    {"Not", build_not},
};

}  // namespace

std::span<const OpEntry> elementwise_nary_ops() { return kOps; }

}  // namespace cpudl::infer
