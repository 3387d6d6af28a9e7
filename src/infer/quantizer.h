// `cpudl quantize --mode dynamic` on ONNX files: every MatMul and Gemm whose weights are a constant
// 2-D float matrix becomes the dynamic int8 pattern ONNX Runtime's quantize_dynamic writes
// (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add]): weights symmetric per output
// channel in [-127, 127], activations asymmetric uint8 per tensor, measured on every run. The
// result is a standard ONNX file (ONNX Runtime runs it); cpudl's optimiser fuses each pattern back
// into one int8 product (optimizer.cpp, ops/quantization.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cpudl::infer {

struct DynamicQuantizeOptions {
  // A layer whose weights lose more than this (relative RMS error of the dequantised weights)
  // stays in float, with a warning.
  double max_weight_error = 0.02;
  // Weights in [-63, 63] (7 bits) instead of [-127, 127]: on CPUs without VNNI the int8 product
  // then takes its shortest exact path (kernels/int8/int8.h), at the cost of one bit of weight
  // precision. ONNX Runtime's quantize_dynamic calls this reduce_range too.
  bool reduce_range = false;
};

struct QuantizedLayer {
  std::string node, op;  // the MatMul or Gemm, as named in the input file
  std::int64_t k = 0, n = 0;
  double weight_error = 0;  // ||W - dequantised W|| / ||W||
  bool quantized = false;
  std::string reason;  // why not, when not
};

struct DynamicQuantizeResult {
  std::vector<QuantizedLayer> layers;  // every MatMul and Gemm seen
  std::size_t bytes_in = 0, bytes_out = 0;  // the models' serialised sizes (weights inline)
};

// Reads `input` (never modified), writes `output` atomically. Throws Error naming the file when
// it is not a loadable ONNX model, when output and input are the same file, or when no layer
// could be quantised.
DynamicQuantizeResult quantize_onnx_dynamic(const std::filesystem::path& input, const std::filesystem::path& output,
                                            const DynamicQuantizeOptions& options = {});

}  // namespace cpudl::infer
