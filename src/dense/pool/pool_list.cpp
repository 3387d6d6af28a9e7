// The pooling implementation list (pool_list.h).
#include "dense/pool/pool_list.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "cpudl/runtime.h"
#include "dense/onednn/dense.h"
#include "kernels/dispatch.h"
#include "runtime/parallel.h"

namespace cpudl::pool {

using dense::PoolShape;

namespace {

// ---- native: channels-last max pooling (kernels/pool/), which keeps one argmax byte per output.
// First for channel counts that do not fill oneDNN's vector (LeNet-5's 6); then measured faster
// for full vectors too (docs/ARCHITECTURE.md): LeNet-5's 16-channel 2x2 pool and ResNet-18's
// 64-channel 3x3/2 pool run about twice as fast as on oneDNN.
kernels::PoolWindow window(const PoolShape& s) {
  return {static_cast<std::size_t>(s.channels),    static_cast<std::size_t>(s.height),
          static_cast<std::size_t>(s.width),       static_cast<std::size_t>(s.out_height()),
          static_cast<std::size_t>(s.out_width()), static_cast<std::size_t>(s.kernel_h),
          static_cast<std::size_t>(s.kernel_w),    static_cast<std::size_t>(s.stride_h),
          static_cast<std::size_t>(s.stride_w),    static_cast<std::size_t>(s.pad_h),
          static_cast<std::size_t>(s.pad_w)};
}
std::size_t out_image(const PoolShape& s) {
  return static_cast<std::size_t>(s.out_height() * s.out_width() * s.channels);
}
std::size_t in_image(const PoolShape& s) { return static_cast<std::size_t>(s.height * s.width * s.channels); }

bool native_runs(const PoolShape& s) {
  // Forward-only pools whose channels fill AVX-512 vectors run faster on oneDNN's inference
  // kernel, which keeps no workspace: ResNet-18's 64-channel 3x3/2 pool at batch 16 in the int8
  // ONNX runtime 11.8 -> 6.6 ms on one thread, 6.5 -> 3.6 ms on two (AMD Zen 5 class, 2026-12-06);
  // our kernel's taps are bound by their address arithmetic there, with or without the argmax.
  if (s.forward_only && s.channels % 16 == 0 && kernels::kernel_table().level >= IsaLevel::avx512)
    return false;
  // An argmax byte addresses at most 255 taps.
  return s.layout == dense::ActivationLayout::nhwc && s.kind == dense::PoolKind::max &&
         s.kernel_h * s.kernel_w <= 255;
}
std::size_t native_workspace(const PoolShape& s) { return out_image(s) * static_cast<std::size_t>(s.batch); }
void native_forward(const PoolShape& s, const float* x, float* y, void* workspace) {
  const kernels::PoolWindow w = window(s);
  const std::size_t in = in_image(s), out = out_image(s);
  auto* arg = static_cast<std::uint8_t*>(workspace);
  const auto forward = kernels::kernel_table().f32_max_pool_nhwc.fn;
  parallel_for(static_cast<std::size_t>(s.batch), 1, [&](std::size_t b, std::size_t e) {
    for (std::size_t n = b; n < e; ++n) forward(w, x + n * in, y + n * out, arg ? arg + n * out : nullptr);
  });
}
void native_backward(const PoolShape& s, const float* dy, const void* workspace, float* dx) {
  const kernels::PoolWindow w = window(s);
  const std::size_t in = in_image(s), out = out_image(s);
  const auto* arg = static_cast<const std::uint8_t*>(workspace);
  const auto backward = kernels::kernel_table().f32_max_pool_nhwc_backward.fn;
  parallel_for(static_cast<std::size_t>(s.batch), 1, [&](std::size_t b, std::size_t e) {
    for (std::size_t n = b; n < e; ++n) backward(w, dy + n * out, arg + n * out, dx + n * in);
  });
}

// ---- oneDNN
bool always(const PoolShape&) { return true; }

const PoolImpl kImpls[] = {
    {"native_max", native_runs, native_workspace, native_forward, native_backward},
    {"onednn", always, onednn::pool2d_workspace_bytes, onednn::pool2d_forward, onednn::pool2d_backward},
};

// ---- uint8
bool native_u8_runs(const PoolShape& s) {
  // Channels that fill 64-byte vectors run faster on oneDNN: ResNet-18's 64-channel 3x3/2 pool
  // at batch 16, one thread, 2.2-2.3 ms there against 3.0-3.2 here (Zen 5 class, 2026-12-07). Its
  // kernel is slow on the others: LeNet-5's 6 channels 0.20 ms at batch 64.
  return s.channels % 64 != 0 && s.layout == dense::ActivationLayout::nhwc &&
         s.kind == dense::PoolKind::max && kernels::kernel_table().u8_max_pool_nhwc.level >= IsaLevel::avx512;
}
void native_u8_forward(const PoolShape& s, const std::uint8_t* x, std::uint8_t* y) {
  const kernels::PoolWindow w = window(s);
  const std::size_t in = in_image(s), out = out_image(s);
  const auto forward = kernels::kernel_table().u8_max_pool_nhwc.fn;
  parallel_for(static_cast<std::size_t>(s.batch), 1, [&](std::size_t b, std::size_t e) {
    for (std::size_t n = b; n < e; ++n) forward(w, x + n * in, y + n * out);
  });
}

const U8PoolImpl kU8Impls[] = {
    {"native_u8", native_u8_runs, native_u8_forward},
    {"onednn uint8", always, onednn::max_pool2d_forward_u8},
};

// The first entry of `impls` that runs s, logged once per shape under CPUDL_VERBOSE.
template <class Impl>
const Impl& choose(std::span<const Impl> impls, const PoolShape& s, bool log) {
  const Impl* chosen = &impls.back();
  for (const Impl& impl : impls)
    if (impl.runs(s)) {
      chosen = &impl;
      break;
    }
  if (log && verbose()) {
    static std::mutex mutex;
    static std::set<std::string> seen;
    std::string line = dense::describe(s);
    line.append(" ").append(dense::layout_name(s.layout)).append(" -> ").append(chosen->name);
    const std::lock_guard<std::mutex> lock(mutex);
    if (seen.insert(line).second) std::fprintf(stderr, "cpudl: pool %s\n", line.c_str());
  }
  return *chosen;
}

}  // namespace

std::span<const PoolImpl> pool_impls() { return kImpls; }
std::span<const U8PoolImpl> u8_max_pool_impls() { return kU8Impls; }

const U8PoolImpl& choose_u8_max_pool_impl(const PoolShape& s, bool log) {
  return choose(std::span<const U8PoolImpl>(kU8Impls), s, log);
}

const PoolImpl& choose_pool_impl(const PoolShape& s, bool log) {
  return choose(std::span<const PoolImpl>(kImpls), s, log);
}

}  // namespace cpudl::pool
