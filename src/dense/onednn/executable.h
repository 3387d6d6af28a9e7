// A primitive with its argument memories bound once: a call only swaps data pointers and runs,
// through oneDNN's C API with a prepared argument array (the C++ map overload allocates).
#pragma once

#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <span>
#include <utility>
#include <vector>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "dense/onednn/dense.h"
#include "dense/onednn/engine.h"

namespace cpudl::onednn {

class Executable {
 public:
  // Entries are built in place (the mutex pins them): set the primitive, then bind arguments.
  void set_primitive(dnnl::primitive primitive) { primitive_ = std::move(primitive); }

  // Binds argument `arg` (DNNL_ARG_*) to a memory of descriptor `md` whose pointer is set per
  // call; returns its slot index for run().
  std::size_t bind(int arg, const dnnl::memory::desc& md) {
    slots_.push_back(dnnl::memory(md, engine(), DNNL_MEMORY_NONE));
    args_.push_back({arg, slots_.back().get()});
    return slots_.size() - 1;
  }
  // Binds an argument to a memory the executable owns (workspace, blocked weights).
  void bind_owned(int arg, const dnnl::memory& memory) {
    owned_.push_back(memory);
    args_.push_back({arg, memory.get()});
  }

  // Sets slot i to pointers[i] and executes. The lock makes concurrent callers of one shape safe.
  void run(std::initializer_list<const void*> pointers) { run(std::span(pointers.begin(), pointers.size())); }
  void run(std::span<const void* const> pointers) {
    std::lock_guard<std::mutex> lock(mutex_);
    const ThreadScope openmp(0);  // oneDNN runs on OpenMP's count of the calling thread: make it ours
    if (pointers.size() != slots_.size()) throw Error("internal: oneDNN argument count mismatch");
    std::size_t i = 0;
    for (const void* p : pointers) slots_[i++].set_data_handle(const_cast<void*>(p));
    const dnnl_status_t status = dnnl_primitive_execute(primitive_.get(), stream().get(),
                                                        static_cast<int>(args_.size()), args_.data());
    if (status != dnnl_success)
      throw Error("oneDNN primitive execution failed (status " + std::to_string(status) + ")");
    stream().wait();
  }

 private:
  dnnl::primitive primitive_;
  std::vector<dnnl::memory> slots_, owned_;
  std::vector<dnnl_exec_arg_t> args_;
  std::mutex mutex_;
};

// An f32 argument that a bf16 primitive reads in bf16 (torch.autocast's operands): rounded to
// nearest even by its own reorder into a buffer the entry owns, before each run of the primitive.
struct Bf16Staging {
  Executable convert;
  // Binds `arg` of `exec` to the owned copy `bf16_md` of an f32 tensor laid out as `f32_md`.
  void init(Executable& exec, int arg, const dnnl::memory::desc& f32_md, const dnnl::memory::desc& bf16_md) {
    const dnnl::memory converted(bf16_md, engine());
    convert.set_primitive(dnnl::reorder(dnnl::reorder::primitive_desc(engine(), f32_md, engine(), bf16_md)));
    convert.bind(DNNL_ARG_FROM, f32_md);
    convert.bind_owned(DNNL_ARG_TO, converted);
    exec.bind_owned(arg, converted);
  }
  void run(const void* values) { convert.run({values}); }
};

// Plain row-major descriptor with explicit strides.
inline dnnl::memory::desc strided_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides,
                                       dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  return dnnl::memory::desc(dims, type, strides);
}

// oneDNN's format tag for an activation layout (dense.h): the one place that maps them.
inline dnnl::memory::format_tag activation_tag(ActivationLayout layout) {
  using tag = dnnl::memory::format_tag;
  switch (layout) {
    case ActivationLayout::nhwc:
      return tag::nhwc;
    case ActivationLayout::blocked:
      return blocked_layout_channels() == 16 ? tag::nChw16c : tag::nChw8c;
    default:
      return tag::nchw;
  }
}

inline dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag);
}

// Appends the activation (Activation from dense.h, as an int: 0 none, 1 relu, 2 clip, 3 swish).
inline void append_activation(dnnl::post_ops& ops, int activation, float clip_min, float clip_max) {
  if (activation == 1) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  if (activation == 2) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, clip_min, clip_max);
  if (activation == 3) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
}

inline dnnl::post_ops make_post_ops(int activation, float clip_min, float clip_max, bool sum) {
  dnnl::post_ops ops;
  if (sum) ops.append_sum(1.0f);
  append_activation(ops, activation, clip_min, clip_max);
  return ops;
}

// Turns oneDNN's exception into a cpudl Error naming the operation and its shape. `describe`
// builds that name only on failure: the hot path of every call must not allocate a string.
template <class Describe, class Fn>
auto with_context(Describe&& describe, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    throw Error(describe() + ": oneDNN: " + e.what());
  }
}

}  // namespace cpudl::onednn
