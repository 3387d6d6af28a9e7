// `cpudl quantize` on ONNX files, writing standard ONNX that other engines run too:
//  - dynamic: every MatMul and Gemm whose weights are a constant 2-D float matrix becomes the
//    pattern ONNX Runtime's quantize_dynamic writes (DynamicQuantizeLinear -> MatMulInteger ->
//    Cast -> Mul [-> Add]): weights symmetric per output channel, activations uint8 per tensor,
//    measured on every run. cpudl's optimiser fuses each pattern into one exact int8 product
//    (optimizer.cpp, ops/quantization.cpp).
//  - static: Conv, Gemm and MatMul with constant weights get QDQ pairs (the format ONNX Runtime's
//    quantize_static writes): the input activation through QuantizeLinear/DequantizeLinear with a
//    uint8 scale and zero point fixed by calibration (calibration.h), the weights int8 per output
//    channel behind a DequantizeLinear; biases stay float.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cpudl/tensor.h"
#include "infer/calibration.h"

namespace cpudl::infer {

struct QuantizeOptions {
  // A layer whose weights lose more than this (relative RMS error of the dequantised weights)
  // stays in float, with a warning.
  double max_weight_error = 0.02;
  // Weights in [-63, 63] (7 bits) instead of [-127, 127]: on CPUs without VNNI the int8 product
  // then takes its shortest exact path (kernels/int8/int8.h), at the cost of one bit of weight
  // precision. ONNX Runtime's quantize_dynamic calls this reduce_range too.
  bool reduce_range = false;
  // Static mode: how calibration turns observed activations into ranges.
  Observer observer = Observer::min_max;
  double percentile = 99.99;
  CalibrationProgress on_calibration_batch = {};  // static mode: each calibration batch run
};

struct QuantizedLayer {
  std::string node, op;       // as named in the input file
  std::int64_t k = 0, n = 0;  // reduction length and output channels
  double weight_error = 0;    // ||W - dequantised W|| / ||W||
  bool quantized = false;
  std::string reason;  // why not, when not
};

struct QuantizedActivation {
  std::string value;
  float lo = 0, hi = 0, scale = 0;
  int zero_point = 0;
};

struct QuantizeResult {
  std::vector<QuantizedLayer> layers;            // every candidate layer seen
  std::vector<QuantizedActivation> activations;  // static mode
  std::size_t bytes_in = 0, bytes_out = 0;       // the models' serialised sizes (weights inline)
  int folded_batch_norms = 0;                    // static mode: BatchNormalization folded into Convs
};

// Read `input` (never modified), write `output` atomically. Throw Error naming the file when it
// is not a loadable ONNX model, when output and input are the same file, or when no layer could
// be quantised; static mode also when the calibration batches do not fit.
QuantizeResult quantize_onnx_dynamic(const std::filesystem::path& input, const std::filesystem::path& output,
                                     const QuantizeOptions& options = {});
// bf16 mode: each Conv, Gemm and MatMul weight stored as a BFLOAT16 initializer (half the bytes)
// behind a Cast to FLOAT; weight_error is bf16's rounding (relative RMS). cpudl runs such a file
// in bf16 on AMX/AVX512-BF16 CPUs (InferenceOptions::follow_bf16_weights), elsewhere as the file
// says: f32 arithmetic on the rounded weights.
QuantizeResult quantize_onnx_bf16(const std::filesystem::path& input, const std::filesystem::path& output,
                                  const QuantizeOptions& options = {});
QuantizeResult quantize_onnx_static(const std::filesystem::path& input, const std::filesystem::path& output,
                                    const std::vector<Tensor>& calibration,
                                    const QuantizeOptions& options = {});

}  // namespace cpudl::infer
