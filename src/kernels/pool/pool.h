// Max pooling on channels-last images. Written first for the channel counts oneDNN's NHWC
// pooling handles badly: its AVX2 kernel works in blocks of 8 channels and took 19 ms forward and
// 18 ms backward for LeNet-5's 6-channel 2x2 pooling of a batch of 256 (most likely its masked
// tails: VMASKMOVPS is microcoded on AMD Zen, and made this kernel's first version as slow); with
// these kernels the whole LeNet-5 training step went from 63 to 30 ms (`cpudl bench model --model
// lenet5 --train`, 1 thread). It then measured faster than oneDNN for full vectors too (LeNet-5's
// 16 channels, ResNet-18's 64: ops/layers.cpp), so all channels-last max pooling runs here.
#pragma once

#include <cstdint>

#include "kernels/kernel_types.h"

namespace cpudl::kernels {

// The input rows of output row oh + 2, requested now: the forward kernels read few bytes per load
// and wait on each cache miss otherwise (measured 3x slower on one thread).
template <class T>
inline void prefetch_window_rows_ahead(const PoolWindow& w, const T* src, std::size_t oh) {
  const std::size_t ahead = (oh + 2) * w.stride_h, row_values = w.width * w.channels;
  if (ahead + w.kernel_h <= w.height + w.pad_h && ahead >= w.pad_h)
    for (std::size_t i = 0; i < w.kernel_h * row_values; i += 64 / sizeof(T))
      __builtin_prefetch(src + (ahead - w.pad_h) * row_values + i);
}

#define CPUDL_DECLARE_POOL(isa)                                                                           \
  void f32_max_pool_nhwc__##isa(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax); \
  void f32_max_pool_nhwc_backward__##isa(const PoolWindow& w, const float* diff_dst,                      \
                                         const std::uint8_t* argmax, float* diff_src);
CPUDL_DECLARE_POOL(ref)
CPUDL_DECLARE_POOL(avx512)
// uint8 (the int8 graphs' activations): oneDNN's uint8 pooling took 0.20 ms for LeNet-5's
// 6-channel 2x2 pool at batch 64 (one thread, Zen 5 class), more than the float pool it replaces.
void u8_max_pool_nhwc__ref(const PoolWindow& w, const std::uint8_t* src, std::uint8_t* dst);
void u8_max_pool_nhwc__avx512(const PoolWindow& w, const std::uint8_t* src, std::uint8_t* dst);
void f32_max_pool_nhwc__avx2(const PoolWindow& w, const float* src, float* dst, std::uint8_t* argmax);
#undef CPUDL_DECLARE_POOL

}  // namespace cpudl::kernels
