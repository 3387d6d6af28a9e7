// Graph rewrites. Shape-free ones run once per session (Constant nodes to constants, Identity and
// Dropout removed, BatchNormalization folded into the Conv or Gemm before it, the GELU pattern
// exporters emit fused into one Gelu); the fusions that need shapes (bias, residual Add and
// activation into Conv/Gemm/MatMul) run once per plan, after shape inference. Each rewrite is
// recorded for `cpudl info`.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "infer/graph.h"
#include "infer/op_registry.h"

namespace cpudl::infer {

struct OptimizerReport {
  std::vector<std::string>
      rewrites;  // one line per rewrite: "folded BatchNormalization 'bn1' into Conv 'conv1'"
  std::map<std::string, int> counts;  // rewrite kind -> how many
  void add(const std::string& kind, const std::string& line) {
    rewrites.push_back(line);
    ++counts[kind];
  }
};

struct OptimizeOptions {
  bool int8_convolutions = true;  // fuse QDQ convolutions into cpudl.Int8Conv (InferenceOptions)
};
// A BatchNormalization (scale, shift, mean, variance: params[0..3], one per output channel) folded
// into the Conv or Gemm before it: its weights w (output channel first) and bias b (or null).
// Shared by the optimiser and the static quantiser, which folds before quantising the weights.
std::pair<HostTensor, HostTensor> fold_batch_norm(const HostTensor& w, const HostTensor* b,
                                                  const HostTensor* const params[4], float epsilon);
void optimize_graph(Graph& graph, OptimizerReport& report, const OptimizeOptions& options = {});
// After fuse_with_shapes: an Int8Conv whose output only int8 readers take (Int8Convs with one
// activation scale and zero point, as X or as a residual added into a uint8 output, and MaxPools
// that keep those parameters) writes that activation in uint8 directly (cpudl.out_scale,
// cpudl.out_zero: QuantizeLinear folded into its epilogue, as ONNX Runtime's QLinearConv does);
// such MaxPools pool bytes, a uint8 residual's parameters go on the convolution that adds it
// (cpudl.residual_scale, cpudl.residual_zero), and the values' descs become UINT8.
void keep_activations_in_int8(Graph& graph, std::map<std::string, ValueDesc>& descs, OptimizerReport& report);
// Tags every Conv, Gemm and MatMul with cpudl.bf16 = 1 (InferenceOptions::bf16): their kernels
// then compute in bf16, and assign_layouts keeps the convolutional region channels-last (what the
// bf16 convolutions read and write) instead of blocked.
void request_bf16(Graph& graph, OptimizerReport& report);
// Whether some Conv, Gemm or MatMul reads its weights through a Cast to FLOAT of a BFLOAT16
// constant (`cpudl quantize --mode bf16`): on the graph as loaded, before constants fold.
bool weights_stored_bf16(const Graph& graph);
void fuse_with_shapes(Graph& graph, const std::map<std::string, ValueDesc>& descs, OptimizerReport& report);
// One layout for the convolutional part of the graph: Conv (and the pools and elementwise ops
// that follow it) keep 4-D activations in oneDNN's blocked nChw8c/nChw16c, what its direct
// convolutions compute in, or NHWC when some convolution's channels do not fit the block;
// everything else sees NCHW. A cpudl.Reorder node converts a value once where the two meet (the
// graph's image input, a Flatten, the outputs). Conv gets cpudl.src_layout/dst_layout, pools and
// GlobalAveragePool cpudl.layout (onednn::ActivationLayout codes).
void assign_layouts(Graph& graph, std::map<std::string, ValueDesc>& descs, OptimizerReport& report);
// After assign_layouts: a 1x1 Conv whose only consumer is a depthwise 3x3 Conv (padding 1, stride
// 1 or 2), both blocked with constant weights, becomes one cpudl.ConvDepthwise node -- inputs X,
// W, B, depthwise W, depthwise B; attributes cpudl.dw_stride and cpudl.dw_activation/clip_* --
// run by oneDNN's fused kernel where it has one (onednn::DepthwiseStage says why).
// CPUDL_FUSE_DEPTHWISE=0 turns it off (for comparisons).
void fuse_depthwise(Graph& graph, const std::map<std::string, ValueDesc>& descs, OptimizerReport& report);
// Drops nodes none of whose outputs reach a graph output.
void remove_dead_nodes(Graph& graph);

}  // namespace cpudl::infer
