// Shared plumbing for op implementations: dtype checks, contiguous f32 inputs, and running a
// contiguous kernel over a tensor split across the pool.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/ops.h"
#include "kernels/dispatch.h"
#include "runtime/op_profile.h"
#include "runtime/parallel.h"
#include "tensor/layout.h"
#include "tensor/strided.h"

namespace cpudl::ops_detail {

inline const kernels::KernelTable& native() { return kernels::kernel_table(); }

// Elements per task below which a kernel runs on the calling thread (fork/join costs ~µs).
inline constexpr std::size_t kGrain = std::size_t{1} << 15;

inline void require_f32(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) throw Error(std::string(op) + ": " + what + " is undefined");
  if (t.dtype() != DType::f32)
    throw Error(std::string(op) + ": " + what + " has dtype " + std::string(dtype_name(t.dtype())) +
                ", expected f32");
}

// An f32 image batch [N, C, H, W] (convolution, pooling, batch norm).
inline void require_4d(const Tensor& x, const char* op) {
  require_f32(x, op, "input");
  if (x.dim() != 4)
    throw Error(std::string(op) + ": input of shape " + shape_text(x.shape()) + ", expected [N, C, H, W]");
}

// The tensor's values as a contiguous f32 tensor, without recording a graph edge.
// A version key for a weight buffer: changes whenever the tensor is updated in place, so
// oneDNN's blocked (or bf16) copy is refreshed exactly when needed. Never 0, which means "keep
// no copy".
inline std::uint64_t weights_version(const Tensor& w) { return w.version() * 2 + 1; }

inline Tensor contiguous_values(const Tensor& t) {
  NoGradGuard no_grad;
  return t.contiguous();
}

// out = fn(a, b) element by element for a dense `a` and `b` of a's shape, in a's layout (b
// copied into it when it differs: a channels-last activation stays channels-last). Serves the
// binary ops' same-shape path and an activation's backward: fn is then its derivative kernel,
// a the forward input or output it needs, b the incoming gradient, alone or fused into the op
// that produced a.
inline Tensor map_pair_in_layout(kernels::F32BinaryFn fn, const Tensor& a, const Tensor& b) {
  const Tensor bv = values_in_layout_of(b, a);
  Tensor out = empty_like(a);
  const float *pa = a.data(), *pb = bv.data();
  float* po = out.data();
  parallel_for(static_cast<std::size_t>(out.numel()), kGrain,
               [&](std::size_t s, std::size_t e) { fn(pa + s, pb + s, po + s, e - s); });
  return out;
}

// out = fn(x) element by element, in x's layout when x is dense (a channels-last activation
// stays channels-last), else row-major.
template <class Fn>
Tensor map_contiguous(const Tensor& x, Fn fn) {
  const Tensor xc = is_dense(x) ? x : contiguous_values(x);
  Tensor out = empty_like(xc);
  const float* in = xc.data();
  float* o = out.data();
  parallel_for(static_cast<std::size_t>(x.numel()), kGrain,
               [&](std::size_t b, std::size_t e) { fn(in + b, o + b, e - b); });
  return out;
}

}  // namespace cpudl::ops_detail

namespace cpudl {}  // namespace cpudl
