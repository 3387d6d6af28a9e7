// Which implementation runs a 2-D pooling: the same kind of ordered list as the convolutions'
// (dense/conv/conv_list.h), walked by training's max_pool2d / avg_pool2d (ops/pooling.cpp) and
// the ONNX runtime's MaxPool / AveragePool (infer/ops/dense.cpp). The first entry that runs the
// shape takes it: the native channels-last max pool (kernels/pool/), then oneDNN's pooling.
// A forward pass in training fills a workspace (the argmax taps) that its backward pass reads.
// CPUDL_VERBOSE=1 prints `pool <shape> -> <entry>` once per shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "dense/shapes.h"

namespace cpudl::pool {

struct PoolImpl {
  std::string_view name;
  bool (*runs)(const dense::PoolShape&);
  // Bytes the forward pass records for the backward (training), or 0.
  std::size_t (*workspace_bytes)(const dense::PoolShape&);
  // workspace: null for inference, or workspace_bytes() bytes.
  void (*forward)(const dense::PoolShape&, const float* x, float* y, void* workspace);
  void (*backward)(const dense::PoolShape&, const float* dy, const void* workspace, float* dx);
};

std::span<const PoolImpl> pool_impls();
// The first entry that runs the shape (oneDNN runs every one).
const PoolImpl& choose_pool_impl(const dense::PoolShape& s, bool log = true);

// Max pooling of uint8 values (the int8 graphs' activations, forward only), its own two-entry
// list: the native channels-last kernel where the CPU has it (kernels/pool/), else oneDNN's.
struct U8PoolImpl {
  std::string_view name;
  bool (*runs)(const dense::PoolShape&);
  void (*forward)(const dense::PoolShape&, const std::uint8_t* x, std::uint8_t* y);
};
std::span<const U8PoolImpl> u8_max_pool_impls();
const U8PoolImpl& choose_u8_max_pool_impl(const dense::PoolShape& s, bool log = true);

}  // namespace cpudl::pool
