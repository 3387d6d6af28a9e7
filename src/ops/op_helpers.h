// Shared plumbing for op implementations: dtype checks, contiguous f32 inputs, and running a
// contiguous kernel over a tensor split across the pool.
#pragma once

#include <string>

#include "cpudl/autograd.h"
#include "cpudl/error.h"
#include "cpudl/ops.h"
#include "kernels/dispatch.h"
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

// The tensor's values as a contiguous f32 tensor, without recording a graph edge.
inline Tensor contiguous_values(const Tensor& t) {
  NoGradGuard no_grad;
  return t.contiguous();
}

// dx = fn(saved, g) element by element (an activation's derivative kernel, given the forward
// input or output it needs), in saved's layout: the backward of an activation, alone or fused
// into the op that produced `saved`.
inline Tensor map_backward(kernels::F32UnaryBackwardFn fn, const Tensor& saved, const Tensor& g) {
  const Tensor gc = values_in_layout_of(g, saved);
  Tensor dx = empty_like(saved);
  const float *s = saved.data(), *pg = gc.data();
  float* pd = dx.data();
  parallel_for(static_cast<std::size_t>(dx.numel()), kGrain,
               [&](std::size_t b, std::size_t e) { fn(s + b, pg + b, pd + b, e - b); });
  return dx;
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

namespace cpudl {
// Adds to this thread's forward FLOP count (ops.h: forward_flops).
void count_forward_flops(double flops);
}  // namespace cpudl
