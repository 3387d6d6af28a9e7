// The dynamic int8 path, bottom up: every variant of the int8 kernels against exact integer
// arithmetic done here; the ONNX quantisation operators (fused by the optimiser and not) against
// the answers NumPy computed from the operator definitions (scripts/gen-quant-fixtures.py); and
// `cpudl quantize --mode dynamic` end to end, with its bad inputs.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "cli_sandbox.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "cpudl/runtime.h"
#include "infer/calibration.h"
#include "infer/onnx_loader.h"
#include "infer/quantizer.h"
#include "kernels/dispatch.h"
#include "kernels/int8/int8.h"

namespace {

using namespace cpudl;
using namespace cpudl::kernels;
namespace fs = std::filesystem;
const fs::path kOnnx = fs::path(CPUDL_FIXTURES_DIR) / ".." / "onnx";
const IsaLevel kMachineLevel = runtime().isa.detected;

struct GemmCase {
  std::size_t m, k, n, n_begin;
  bool bias, relu, per_column;
  int extremes;  // 0 random; 1 all a = 255 and b at its limits (the pair sums that saturate VPMADDUBSW); 2 a
                 // = 0
};

TEST(Int8Kernels, EveryGemmVariantIsExact) {
  const GemmCase cases[] = {
      {1, 1, 1, 0, false, false, true, 0},
      {3, 5, 7, 0, true, false, true, 0},
      {4, 32, 16, 0, true, true, true, 0},
      {5, 33, 17, 0, true, false, false, 0},
      {64, 784, 40, 8, true, true, true, 0},
      {7, 100, 8, 0, false, true, true, 0},
      {6, 64, 24, 16, true, false, true, 1},
      {2, 257, 9, 0, false, false, true, 1},
      {3, 31, 19, 0, true, false, true, 2},
      {9, 70, 150, 8, true, true, true, 0},  // past one 64-column tile of the VNNI kernel, odd rows
  };
  std::mt19937 rng(7);
  for (const GemmCase& c : cases)
    for (const U8S8WeightRange range :
         {U8S8WeightRange::eight_bit, U8S8WeightRange::seven_bit, U8S8WeightRange::with_minus_128}) {
      const bool seven_bit = range == U8S8WeightRange::seven_bit,
                 minus_128 = range == U8S8WeightRange::with_minus_128;
      SCOPED_TRACE(::testing::Message()
                   << "m " << c.m << " k " << c.k << " n " << c.n << " from column " << c.n_begin
                   << (seven_bit   ? ", 7-bit weights"
                       : minus_128 ? ", weights with -128"
                                   : ", 8-bit weights"));
      std::vector<std::uint8_t> a(c.m * c.k);
      std::vector<std::int8_t> b(c.k * c.n);
      for (auto& v : a)
        v = c.extremes == 1 ? 255 : c.extremes == 2 ? 0 : static_cast<std::uint8_t>(rng() % 256);
      const int lo = seven_bit ? -64 : minus_128 ? -128 : -127, hi = seven_bit ? 63 : 127;
      for (std::size_t i = 0; i < b.size(); ++i)
        b[i] = static_cast<std::int8_t>(
            c.extremes ? (i % 3 == 0 ? lo : hi)
                       : lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1)));
      b[0] = static_cast<std::int8_t>(lo);  // the range's ends are present, so packing must classify it
      if (b.size() > 1) b[1] = static_cast<std::int8_t>(hi);
      std::vector<float> scale(c.per_column ? c.n : 1), bias(c.n);
      for (auto& s : scale) s = 0.001f + static_cast<float>(rng() % 1000) * 1e-5f;
      for (auto& v : bias) v = static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f;
      const std::int32_t zero = c.extremes == 2 ? 255 : static_cast<std::int32_t>(rng() % 256);
      const float a_scale = 0.0173f;
      std::vector<std::int8_t> packed(u8s8_packed_bytes(c.k, c.n) + 32);
      auto* aligned =
          reinterpret_cast<std::int8_t*>((reinterpret_cast<std::uintptr_t>(packed.data()) + 31) / 32 * 32);
      std::vector<std::int32_t> sums(c.n);
      ASSERT_EQ(pack_u8s8_weights(b.data(), c.n, c.k, c.n, aligned, sums.data()), range);
      // Exact: the integer sum in 64 bits from the unpacked operands, then the float steps in order.
      std::vector<float> expected(c.m * c.n);
      for (std::size_t i = 0; i < c.m; ++i)
        for (std::size_t j = 0; j < c.n; ++j) {
          std::int64_t sum = 0;
          for (std::size_t q = 0; q < c.k; ++q)
            sum += (static_cast<std::int64_t>(a[i * c.k + q]) - zero) * b[q * c.n + j];
          float y = static_cast<float>(sum) * (a_scale * scale[c.per_column ? j : 0]);
          if (c.bias) y += bias[j];
          if (c.relu) y = std::max(y, 0.0f);
          expected[i * c.n + j] = y;
        }
      const std::size_t ld = u8s8_padded_k(c.k) + 4;  // a row stride longer than the row
      std::vector<std::uint8_t> raw(c.m * ld, 99);
      std::vector<std::int8_t> shifted(c.m * ld, 99);
      std::vector<std::uint8_t> magnitude(c.m * ld, 99);
      prepare_u8s8_rows(a.data(), c.m, c.k, c.k, raw.data(), shifted.data(), magnitude.data(), ld);
      int ran = 0;
      for (const auto& variant : u8s8_gemm_variants()) {
        if (variant.level > kMachineLevel) continue;
        if (minus_128 && !u8s8_gemm_takes_minus_128(variant.level)) continue;
        SCOPED_TRACE(variant.name);
        const std::size_t ldc = c.n + 2;
        std::vector<float> out(c.m * ldc, -7.0f);
        U8S8GemmArgs g{};
        g.a = raw.data();
        g.a_shifted = shifted.data();
        g.a_magnitude = magnitude.data();
        g.lda = ld;
        g.m = c.m;
        g.k = c.k;
        g.a_zero = zero;
        g.a_scale = a_scale;
        g.b_packed = aligned;
        g.b_seven_bit = seven_bit;
        g.b_col_sums = sums.data();
        g.b_scale = scale.data();
        g.b_scale_per_column = c.per_column;
        g.bias = c.bias ? bias.data() : nullptr;
        g.relu = c.relu;
        g.c = out.data();
        g.ldc = ldc;
        g.n_begin = c.n_begin;
        g.n_end = c.n;
        variant.fn(g);
        for (std::size_t i = 0; i < c.m; ++i) {
          for (std::size_t j = 0; j < ldc; ++j) {
            const float got = out[i * ldc + j];
            if (j < c.n_begin || j >= c.n) {
              ASSERT_EQ(got, -7.0f) << "wrote outside its columns: row " << i << " column " << j;
              continue;
            }
            // The float epilogue may fuse a multiply-add: one rounding's worth of slack, far below
            // the smallest integer error (a_scale * scale ~ 2e-5).
            ASSERT_NEAR(got, expected[i * c.n + j], 1e-6f * (std::fabs(expected[i * c.n + j]) + 1.0f))
                << "row " << i << " column " << j;
          }
        }
        ++ran;
      }
      EXPECT_GE(ran, 1);
    }
}

TEST(Int8Kernels, PackingFlagsWeightsTheExactSimdPathCannotTake) {
  const std::int8_t b[4] = {1, -128, 3, 4};
  std::vector<std::int8_t> packed(u8s8_packed_bytes(2, 2));
  std::int32_t sums[2];
  EXPECT_EQ(pack_u8s8_weights(b, 2, 2, 2, packed.data(), sums), U8S8WeightRange::with_minus_128);
  EXPECT_EQ(sums[0], 4);
  EXPECT_EQ(sums[1], -124);
}

TEST(Int8Kernels, MinMaxAndQuantiseMatchTheDefinitions) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (std::size_t n : {1u, 7u, 8u, 31u, 32u, 33u, 100u, 1000u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = normal(rng);
    // Exact ties and out-of-range values: x / 0.5 = k + 0.5 rounds to even; clamping at 0 and 255.
    const float specials[] = {0.25f, 0.75f, -0.25f, 1.25f, 500.0f, -500.0f, 63.75f};
    for (std::size_t i = 0; i < n && i < 7; ++i) x[i * 3 % n] = specials[i];
    const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
    for (const auto& variant : f32_min_max_variants()) {
      if (variant.level > kMachineLevel) continue;
      SCOPED_TRACE(variant.name);
      float a = 0, b = 0;
      variant.fn(x.data(), n, &a, &b);
      EXPECT_EQ(a, *lo);
      EXPECT_EQ(b, *hi);
    }
    for (const auto& variant : f32_quantize_u8_variants()) {
      if (variant.level > kMachineLevel) continue;
      SCOPED_TRACE(variant.name);
      std::vector<std::uint8_t> y(n);
      variant.fn(x.data(), n, 0.5f, 100, y.data());
      for (std::size_t i = 0; i < n; ++i) {
        const double r = std::nearbyint(static_cast<double>(x[i] / 0.5f)) + 100;
        ASSERT_EQ(y[i], static_cast<std::uint8_t>(std::clamp(r, 0.0, 255.0))) << "x = " << x[i];
      }
    }
  }
}

// The ONNX operators, fused by the optimiser (DynamicQuantizeLinear + MatMulInteger + Cast + Mul
// + Add into one int8 product) and as the file has them, against NumPy.
TEST(QuantOps, MatchNumPyFusedAndUnfused) {
  const Tensor x = io::load_npy(kOnnx / "quantops_opset13.input.npy");
  for (bool optimize : {true, false}) {
    SCOPED_TRACE(optimize ? "optimised" : "as in the file");
    InferenceOptions options;
    options.optimize = optimize;
    InferenceSession s(kOnnx / "quantops_opset13.onnx", options);
    const auto y = s.run({x});
    ASSERT_EQ(y.size(), 6u);
    for (std::size_t o = 0; o < 6; ++o) {
      SCOPED_TRACE("output " + std::to_string(o));
      const Tensor want = io::load_npy(kOnnx / ("quantops_opset13.output" + std::to_string(o) + ".npy"));
      ASSERT_EQ(y[o].dtype(), want.dtype());
      ASSERT_EQ(y[o].shape(), want.shape());
      if (want.dtype() == DType::f32) {
        for (std::int64_t i = 0; i < want.numel(); ++i)
          EXPECT_NEAR(y[o].data()[i], want.data()[i], 1e-6 * (1 + std::fabs(want.data()[i])))
              << "element " << i;
      } else {
        const std::size_t bytes = static_cast<std::size_t>(want.numel()) * dtype_size(want.dtype());
        EXPECT_EQ(std::memcmp(y[o].raw_data(), want.raw_data(), bytes), 0) << "integer outputs must be exact";
      }
    }
    const ModelInfo info = s.info({x.shape()});
    EXPECT_EQ(info.ops_planned.count("cpudl.Int8MatMul"), optimize ? 1u : 0u);
  }
}

class QuantizeCli : public cpudl::testing::CliSandbox {};

std::map<std::string, int> op_counts(const fs::path& model) {
  onnx::ModelProto m;
  const std::string bytes = io::read_file(model);
  EXPECT_TRUE(m.ParseFromString(bytes));
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ++ops[n.op_type()];
  return ops;
}

TEST_F(QuantizeCli, DynamicMlpRunsFusedAndUnfusedCloseToPyTorch) {
  const std::string in = (kOnnx / "mlp_opset13.onnx").string();  // weights in external data
  const std::string before = io::read_file(in);
  const cpudl::testing::CliResult r =
      run("quantize " + in + " " + path("int8.onnx") + " --mode dynamic --calib " +
          (kOnnx / "mlp_opset13.input.npy").string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(io::read_file(in), before) << "the input model must never change";
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["layers"].size(), 3u);
  EXPECT_EQ(report["samples"], 3);
  EXPECT_DOUBLE_EQ(report["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(report["bytes_out"].get<double>(), 0.3 * report["bytes_in"].get<double>());
  // A standard ONNX file: the quantize_dynamic pattern, the float weights gone, no external data.
  const auto ops = op_counts(path("int8.onnx"));
  EXPECT_EQ(ops.at("MatMulInteger"), 3);
  EXPECT_EQ(ops.at("DynamicQuantizeLinear"), 3);
  EXPECT_EQ(ops.count("Gemm"), 0u);
  const Tensor x = io::load_npy(kOnnx / "mlp_opset13.input.npy");
  const Tensor pytorch = io::load_npy(kOnnx / "mlp_opset13.output.npy");
  std::vector<Tensor> results;
  for (bool optimize : {true, false}) {
    InferenceOptions options;
    options.optimize = optimize;
    InferenceSession s(path("int8.onnx"), options);
    results.push_back(s.run({x})[0]);
    // `cpudl info` says how the int8 operators run on this CPU.
    const std::string how = s.info({x.shape()}).int8_execution;
    EXPECT_NE(how.find(optimize ? "u8s8_gemm" : "MatMulInteger"), std::string::npos) << how;
  }
  double fused_vs_unfused = 0, vs_float = 0, scale = 0;
  for (std::int64_t i = 0; i < pytorch.numel(); ++i) {
    fused_vs_unfused = std::max(fused_vs_unfused,
                                static_cast<double>(std::fabs(results[0].data()[i] - results[1].data()[i])));
    vs_float = std::max(vs_float, static_cast<double>(std::fabs(results[0].data()[i] - pytorch.data()[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(pytorch.data()[i])));
  }
  EXPECT_LT(fused_vs_unfused, 1e-6 * scale) << "the fused int8 product must compute what the graph says";
  EXPECT_LT(vs_float, 2e-2 * scale) << "int8 should stay close to the float model";
  EXPECT_GT(vs_float, 0.0) << "suspicious: int8 identical to float";
}

TEST_F(QuantizeCli, BadInputsAreNamedAndLeaveNothingBehind) {
  const std::string mlp = (kOnnx / "mlp_opset13.onnx").string();
  // Usage errors: exit 2.
  cpudl::testing::CliResult r = run("quantize " + mlp + " " + path("o.onnx") + " --mode fancy");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("expected dynamic, static or bf16"), std::string::npos) << r.err;
  EXPECT_EQ(run("quantize " + mlp + " " + path("o.onnx")).exit_code, 2);
  EXPECT_EQ(run("quantize " + mlp + " " + path("o.onnx") + " --mode dynamic --type q8_0").exit_code, 2);
  fs::create_directories(path("empty"));
  r = run("quantize " + mlp + " " + path("o.onnx") + " --mode dynamic --calib " + path("empty"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no .npy"), std::string::npos) << r.err;
  // Calibration data of the wrong shape: named, exit 1.
  io::save_npy(path("wrong.npy"), Tensor::zeros({2, 3, 28, 28}));
  r = run("quantize " + mlp + " " + path("o.onnx") + " --mode dynamic --calib " + path("wrong.npy"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("wrong.npy"), std::string::npos) << r.err;
  // A model with nothing to quantise.
  r = run("quantize " + (kOnnx / ".." / "fuzz_corpus" / "onnx" / "conv_relu.onnx").string() + " " +
          path("c.onnx") + " --mode dynamic");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nothing to quantise"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("c.onnx")));
  // The output may not replace the input.
  fs::copy_file(mlp, path("m.onnx"));
  fs::copy_file(kOnnx / "mlp_opset13.onnx.data", path("mlp_opset13.onnx.data"));
  const std::string before = io::read_file(path("m.onnx"));
  r = run("quantize " + path("m.onnx") + " " + path("m.onnx") + " --mode dynamic");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is the same file as the input"), std::string::npos) << r.err;
  EXPECT_EQ(io::read_file(path("m.onnx")), before);
  // A threshold no layer meets: every layer listed as kept, nothing quantised, no file.
  r = run("quantize " + mlp + " " + path("t.onnx") + " --mode dynamic --max-weight-error 0.0001");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("exceeds"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("t.onnx")));
}

TEST_F(QuantizeCli, LayersAboveTheErrorThresholdStayFloatWithAWarning) {
  // A threshold between the two worst layers' errors keeps exactly the worst in float.
  const std::string mlp = (kOnnx / "mlp_opset13.onnx").string();
  const auto probe = infer::quantize_onnx_dynamic(mlp, path("all.onnx"));
  ASSERT_EQ(probe.layers.size(), 3u);
  std::vector<double> errors;
  for (const auto& l : probe.layers) errors.push_back(l.weight_error);
  std::sort(errors.begin(), errors.end());
  ASSERT_LT(errors[1], errors[2]);
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "%.9f",
                (errors[1] + errors[2]) / 2);  // only the worst layer exceeds it
  const cpudl::testing::CliResult r =
      run("quantize " + mlp + " " + path("o.onnx") + " --mode dynamic --max-weight-error " + threshold);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kept in float"), std::string::npos) << r.err;
  const auto ops = op_counts(path("o.onnx"));
  EXPECT_EQ(ops.at("MatMulInteger"), 2);
  EXPECT_EQ(ops.at("Gemm"), 1);
  EXPECT_EQ(run("run " + path("o.onnx") + " --input " + (kOnnx / "mlp_opset13.input.npy").string()).exit_code,
            0);
}

TEST_F(QuantizeCli, ReduceRangeWritesSevenBitWeightsThatStayAccurate) {
  const std::string mlp = (kOnnx / "mlp_opset13.onnx").string();
  const cpudl::testing::CliResult r =
      run("quantize " + mlp + " " + path("r.onnx") + " --mode dynamic --reduce-range --json --calib " +
          (kOnnx / "mlp_opset13.input.npy").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(io::read_file(path("r.onnx"))));
  int matrices = 0;
  for (const auto& t : m.graph().initializer()) {
    if (t.data_type() != onnx::TensorProto::INT8 || t.dims_size() != 2) continue;
    ++matrices;
    const auto [lo, hi] = std::minmax_element(t.raw_data().begin(), t.raw_data().end(), [](char a, char b) {
      return static_cast<std::int8_t>(a) < static_cast<std::int8_t>(b);
    });
    EXPECT_EQ(static_cast<std::int8_t>(*lo), -63) << t.name();
    EXPECT_EQ(static_cast<std::int8_t>(*hi), 63) << t.name();
  }
  EXPECT_EQ(matrices, 3);
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(report["top1_agreement"].get<double>(), 1.0);
  EXPECT_LT(report["max_abs_error"].get<double>(), 4e-2 * report["output_scale"].get<double>());
  // The fused (7-bit kernel path) and unfused runs agree.
  const Tensor x = io::load_npy(kOnnx / "mlp_opset13.input.npy");
  InferenceOptions plain;
  plain.optimize = false;
  const Tensor fused = InferenceSession(path("r.onnx")).run({x})[0];
  const Tensor unfused = InferenceSession(path("r.onnx"), plain).run({x})[0];
  for (std::int64_t i = 0; i < fused.numel(); ++i) EXPECT_NEAR(fused.data()[i], unfused.data()[i], 1e-6) << i;
}

TEST_F(QuantizeCli, StaticWritesQdqCalibratedOnTheInputs) {
  const std::string lenet = (kOnnx / "lenet5_opset13.onnx").string();
  const Tensor x = io::load_npy(kOnnx / "lenet5_opset13.input.npy");
  const cpudl::testing::CliResult r =
      run("quantize " + lenet + " " + path("s.onnx") + " --mode static --json --calib " +
          (kOnnx / "lenet5_opset13.input.npy").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  // Every Conv and Gemm quantised; each reads its activation and weights through DequantizeLinear.
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(io::read_file(path("s.onnx"))));
  std::map<std::string, std::string> producer;
  for (const auto& n : m.graph().node())
    for (const auto& o : n.output()) producer[o] = n.op_type();
  int layers = 0;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "Conv" && n.op_type() != "Gemm") continue;
    ++layers;
    EXPECT_EQ(producer[n.input(0)], "DequantizeLinear") << n.name();
    EXPECT_EQ(producer[n.input(1)], "DequantizeLinear") << n.name();
  }
  EXPECT_EQ(layers, static_cast<int>(report["layers"].size()));
  EXPECT_GE(layers, 4);
  // The first layer's activation is the image itself: min-max calibration must give exactly the
  // uint8 parameters of its range.
  const auto values = x.to_vector();
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const float want_scale = (std::max(*hi, 0.0f) - std::min(*lo, 0.0f)) / 255.0f;
  const auto& first = report["activations"][0];
  EXPECT_EQ(first["value"], "input");
  EXPECT_FLOAT_EQ(first["scale"].get<float>(), want_scale);
  EXPECT_EQ(first["zero_point"].get<int>(),
            static_cast<int>(std::nearbyint(-std::min(*lo, 0.0f) / want_scale)));
  // Close to the float model (and to PyTorch).
  const Tensor pytorch = io::load_npy(kOnnx / "lenet5_opset13.output.npy");
  const Tensor y = InferenceSession(path("s.onnx")).run({x})[0];
  double err = 0, scale = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(y.data()[i] - pytorch.data()[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(pytorch.data()[i])));
  }
  EXPECT_LT(err, 3e-2 * scale);
  EXPECT_GT(err, 0.0);
  // The optimiser turns each QDQ Gemm into one exact int8 product: the same numbers as the QDQ
  // graph computes in float, up to the float sums' rounding.
  InferenceOptions plain;
  plain.optimize = false;
  InferenceOptions int8_conv;
  int8_conv.int8_convolutions = true;
  InferenceSession fused_session(path("s.onnx"), int8_conv);
  const Tensor fused = fused_session.run({x})[0];
  const Tensor unfused = InferenceSession(path("s.onnx"), plain).run({x})[0];
  for (std::int64_t i = 0; i < fused.numel(); ++i)
    EXPECT_NEAR(fused.data()[i], unfused.data()[i], 1e-5 * scale) << i;
  const ModelInfo info = fused_session.info({x.shape()});
  int gemms = 0, convs = 0;
  for (const auto& l : report["layers"]) gemms += l["op"] == "Gemm", convs += l["op"] == "Conv";
  ASSERT_GT(gemms, 0);
  ASSERT_GT(convs, 0);
  EXPECT_EQ(info.ops_planned.count("cpudl.Int8MatMul") ? info.ops_planned.at("cpudl.Int8MatMul") : 0, gemms);
  // Without VNNI, 8-bit weights keep the convolutions float (oneDNN's int16 pair sums would saturate);
  // with it, all but conv1, whose one input channel keeps it float too (optimizer.cpp).
  EXPECT_EQ(info.ops_planned.count("cpudl.Int8Conv") ? info.ops_planned.at("cpudl.Int8Conv") : 0,
            runtime().isa.active >= IsaLevel::avx512_vnni ? convs - 1 : 0);
  EXPECT_EQ(info.ops_planned.count("Conv") ? info.ops_planned.at("Conv") : 0,
            runtime().isa.active >= IsaLevel::avx512_vnni ? 1 : convs);
  // Bad input: no --calib, a bad observer.
  EXPECT_EQ(run("quantize " + lenet + " " + path("t.onnx") + " --mode static").exit_code, 2);
  EXPECT_EQ(run("quantize " + lenet + " " + path("t.onnx") + " --mode static --observer median --calib " +
                (kOnnx / "lenet5_opset13.input.npy").string())
                .exit_code,
            2);
  EXPECT_FALSE(fs::exists(path("t.onnx")));
}

TEST_F(QuantizeCli, Bf16StoresHalfTheWeightBytesAndComputesInBf16WhereTheCpuCan) {
  const fs::path in = kOnnx / "resnet18_opset13.onnx";
  const infer::QuantizeResult r = infer::quantize_onnx_bf16(in, path("b.onnx"));
  EXPECT_LT(r.bytes_out, r.bytes_in * 55 / 100);
  ASSERT_EQ(r.layers.size(), 21u);  // 20 Conv and the Gemm
  for (const auto& l : r.layers) {
    EXPECT_TRUE(l.quantized) << l.node << ": " << l.reason;
    EXPECT_GT(l.weight_error, 0.0);
    EXPECT_LT(l.weight_error, 4e-3);  // bf16 keeps 8 bits of mantissa: about 2^-9 relative
  }
  // A standard file: the weights are BFLOAT16 initializers behind Casts to FLOAT.
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(io::read_file(path("b.onnx"))));
  int bf16 = 0;
  for (const auto& t : m.graph().initializer()) {
    bf16 += t.data_type() == onnx::TensorProto::BFLOAT16;
    EXPECT_FALSE(t.data_type() == onnx::TensorProto::FLOAT && t.dims_size() >= 2)
        << "float weights left: " << t.name();
  }
  EXPECT_EQ(bf16, 21);
  EXPECT_EQ(op_counts(path("b.onnx"))["Cast"], 21);
  // Run: in bf16 where the CPU has the units (without asking), else f32 on the rounded weights;
  // either way PyTorch's model within bf16's error, and --precision fp32 (follow_bf16_weights off)
  // computes in f32.
  const Tensor x = io::load_npy(kOnnx / "resnet18_opset13.input.npy");
  const Tensor golden = io::load_npy(kOnnx / "resnet18_opset13.output.npy");
  InferenceSession session(path("b.onnx"));
  const Tensor y = session.run({x})[0];
  double err = 0, scale = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(y.data()[i]) - golden.data()[i]));
    scale = std::max(scale, static_cast<double>(std::fabs(golden.data()[i])));
  }
  EXPECT_LT(err, 3e-2 * scale);
  EXPECT_GT(err, 0.0);
  const bool units = runtime().isa.active >= IsaLevel::avx512_bf16;
  const ModelInfo info = session.info({x.shape()});
  EXPECT_EQ(info.rewrite_counts.count("bf16"), units ? 1u : 0u);
  if (units) {
    for (const auto& impl : info.implementations)
      if (impl.op == "Conv") {
        EXPECT_NE(impl.implementation.find("bf16"), std::string::npos) << impl.node;
      }
  }
  InferenceOptions fp32;
  fp32.follow_bf16_weights = false;
  EXPECT_EQ(InferenceSession(path("b.onnx"), fp32).info({x.shape()}).rewrite_counts.count("bf16"), 0u);
  // The CLI: the report, and the same refusals as the other modes.
  const cpudl::testing::CliResult cli =
      run("quantize " + in.string() + " " + path("c.onnx") + " --mode bf16 --json --calib " +
          (kOnnx / "resnet18_opset13.input.npy").string());
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  const auto report = nlohmann::json::parse(cli.out);
  EXPECT_EQ(report["mode"], "bf16");
  EXPECT_EQ(report["top1_agreement"], 1.0);
  EXPECT_EQ(run("quantize " + in.string() + " " + in.string() + " --mode bf16").exit_code, 2);
}

TEST(Calibration, PercentileClipsAnOutlierThatMinMaxKeeps) {
  const infer::Graph g = infer::load_onnx(kOnnx / "mlp_opset13.onnx");
  // 4 x 784 values in [0, 1), one of them 100.
  std::vector<float> v(4 * 784);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 1000) / 1000.0f;
  v[123] = 100.0f;
  const Tensor batch = Tensor::from_vector(v, {4, 1, 28, 28});
  const std::string value = g.inputs[0].name;
  const auto minmax = infer::calibrate(g, {value}, {batch}, infer::Observer::min_max);
  EXPECT_FLOAT_EQ(minmax.at(value).hi, 100.0f);
  EXPECT_FLOAT_EQ(minmax.at(value).lo, 0.0f);
  const auto clipped = infer::calibrate(g, {value}, {batch}, infer::Observer::percentile, 99.9);
  EXPECT_LT(clipped.at(value).hi, 1.1f);
  EXPECT_GE(clipped.at(value).hi, 0.99f);
  // A batch that does not fit the model is named.
  EXPECT_THROW(infer::calibrate(g, {value}, {Tensor::zeros({2, 3})}, infer::Observer::min_max), Error);
}

TEST_F(QuantizeCli, WeightsSharedThroughIdentityNodesAreQuantisedAndTheFloatCopiesDropped) {
  // PyTorch exports the second encoder layer's weights as Identity nodes of the first's.
  const std::string tr = (kOnnx / "transformer_opset13.onnx").string();
  const auto r = infer::quantize_onnx_dynamic(tr, path("t.onnx"));
  int quantized = 0;
  for (const auto& l : r.layers) quantized += l.quantized;
  EXPECT_EQ(quantized, 8);  // 4 weight products per layer; the attention products have no weights
  EXPECT_LT(r.bytes_out, r.bytes_in * 7 / 10);
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(io::read_file(path("t.onnx"))));
  for (const auto& t : m.graph().initializer())
    EXPECT_FALSE(t.data_type() == onnx::TensorProto::FLOAT && t.dims_size() == 2 &&
                 t.dims(0) * t.dims(1) >= 64 * 64)
        << "float weights left behind: " << t.name();
  const Tensor x = io::load_npy(kOnnx / "transformer_opset13.input.npy");
  const Tensor want = io::load_npy(kOnnx / "transformer_opset13.output.npy");
  const Tensor y = InferenceSession(path("t.onnx")).run({x})[0];
  double err = 0, scale = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(y.data()[i] - want.data()[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want.data()[i])));
  }
  EXPECT_LT(err, 2e-2 * scale);
}

TEST_F(QuantizeCli, StaticTransformerProductsFuseWithTheirZeroPoints) {
  // LayerNorm outputs span both signs: the activations' zero points are far from 0 here.
  const Tensor x = io::load_npy(kOnnx / "transformer_opset13.input.npy");
  const auto r = infer::quantize_onnx_static(kOnnx / "transformer_opset13.onnx", path("ts.onnx"), {x});
  ASSERT_FALSE(r.activations.empty());
  EXPECT_TRUE(std::any_of(r.activations.begin(), r.activations.end(),
                          [](const auto& a) { return a.zero_point > 20; }));
  InferenceOptions plain;
  plain.optimize = false;
  InferenceSession fused_session(path("ts.onnx"));
  const Tensor fused = fused_session.run({x})[0];
  const Tensor unfused = InferenceSession(path("ts.onnx"), plain).run({x})[0];
  double scale = 0;
  for (std::int64_t i = 0; i < unfused.numel(); ++i)
    scale = std::max(scale, static_cast<double>(std::fabs(unfused.data()[i])));
  for (std::int64_t i = 0; i < fused.numel(); ++i)
    ASSERT_NEAR(fused.data()[i], unfused.data()[i], 1e-4 * scale) << i;
  EXPECT_EQ(fused_session.info({x.shape()}).ops_planned.at("cpudl.Int8MatMul"), 8);
}

TEST_F(QuantizeCli, AccuracyReportOnHeldOutInputsWithLabels) {
  // Labels chosen so the float model is right on rows 0 and 2 and wrong on row 1: the report's
  // float accuracy must then be exactly 2/3, and int8 (which agrees with float here) the same.
  const std::string mlp = (kOnnx / "mlp_opset13.onnx").string();
  const Tensor x = io::load_npy(kOnnx / "mlp_opset13.input.npy");
  const Tensor y = io::load_npy(kOnnx / "mlp_opset13.output.npy");
  std::vector<std::int64_t> labels(3);
  for (std::int64_t i = 0; i < 3; ++i) {
    const float* row = y.data() + i * 10;
    labels[static_cast<std::size_t>(i)] = std::max_element(row, row + 10) - row;
  }
  labels[1] = (labels[1] + 1) % 10;
  io::save_npy(path("labels.npy"), Tensor::from_buffer(labels.data(), {3}, DType::i64));
  io::save_npy(path("calib.npy"), Tensor::rand({4, 1, 28, 28}));
  const cpudl::testing::CliResult r =
      run("quantize " + mlp + " " + path("q.onnx") + " --mode static --json --calib " + path("calib.npy") +
          " --eval " + (kOnnx / "mlp_opset13.input.npy").string() + " --labels " + path("labels.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["inputs"], "eval");
  EXPECT_EQ(report["samples"], 3);
  EXPECT_NEAR(report["fp32_accuracy"].get<double>(), 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(report["int8_accuracy"].get<double>(), 2.0 / 3.0, 1e-12);
  // Labels that do not match the inputs, and labels without inputs: named errors.
  io::save_npy(path("short.npy"), Tensor::from_buffer(labels.data(), {2}, DType::i64));
  cpudl::testing::CliResult bad =
      run("quantize " + mlp + " " + path("q2.onnx") + " --mode dynamic --eval " +
          (kOnnx / "mlp_opset13.input.npy").string() + " --labels " + path("short.npy"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("short.npy"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(path("q2.onnx"))) << "checked before writing";
  EXPECT_EQ(run("quantize " + mlp + " " + path("q3.onnx") + " --mode dynamic --labels " + path("labels.npy"))
                .exit_code,
            2);
}

TEST_F(QuantizeCli, StaticConvolutionsRunInt8WithTheirWindows) {
  // 7x7 stride 2 padding 3, 1x1 stride 2, 3x3 stride 2 padding 1: each int8 convolution computes
  // what its QDQ graph does, up to float rounding.
  const Tensor x = io::load_npy(kOnnx / "convwindows_opset13.input.npy");
  // Without VNNI (ctest's CPUDL_ISA=avx2 pass) only 7-bit weights run in int8: 8-bit ones would
  // saturate VPMADDUBSW's int16 pair sums, so their convolutions stay float, and say so.
  const bool vnni = runtime().isa.active >= IsaLevel::avx512_vnni;
  infer::QuantizeOptions q;
  q.reduce_range = !vnni;
  if (!vnni) {
    infer::quantize_onnx_static(kOnnx / "convwindows_opset13.onnx", path("c8.onnx"), {x});
    const ModelInfo info = InferenceSession(path("c8.onnx")).info({x.shape()});
    EXPECT_EQ(info.ops_planned.count("cpudl.Int8Conv"), 0u);
    EXPECT_EQ(info.rewrite_counts.at("kept QDQ Conv in float"), 3);
  }
  infer::quantize_onnx_static(kOnnx / "convwindows_opset13.onnx", path("c.onnx"), {x}, q);
  InferenceOptions plain;
  plain.optimize = false;
  InferenceOptions int8_conv;
  int8_conv.int8_convolutions = true;
  InferenceSession fused_session(path("c.onnx"), int8_conv);
  const auto fused = fused_session.run({x});
  const auto unfused = InferenceSession(path("c.onnx"), plain).run({x});
  ASSERT_EQ(fused.size(), 3u);
  for (std::size_t o = 0; o < 3; ++o) {
    double scale = 0;
    for (std::int64_t i = 0; i < unfused[o].numel(); ++i)
      scale = std::max(scale, static_cast<double>(std::fabs(unfused[o].data()[i])));
    for (std::int64_t i = 0; i < fused[o].numel(); ++i)
      ASSERT_NEAR(fused[o].data()[i], unfused[o].data()[i], 1e-5 * scale)
          << "output " << o << " element " << i;
  }
  EXPECT_EQ(fused_session.info({x.shape()}).ops_planned.at("cpudl.Int8Conv"), 3);
  // Off: the convolutions stay float between their QDQ pairs.
  InferenceOptions float_conv;
  float_conv.int8_convolutions = false;
  EXPECT_EQ(
      InferenceSession(path("c.onnx"), float_conv).info({x.shape()}).ops_planned.count("cpudl.Int8Conv"), 0u);
  // ResNet-18 end to end: 20 int8 convolutions with batch norms and residuals between. 18
  // requantisations deep (and with random weights, which amplify), a float-rounding difference
  // now and then crosses a rounding boundary of the next QuantizeLinear, one step of that
  // activation's range: fused and unfused agree to about 1% of the output's scale (measured: max
  // 1.1%, mean 0.24%), where a wrong window or zero point costs the whole scale.
  const Tensor rx = io::load_npy(kOnnx / "resnet18_opset13.input.npy");
  // The fixture keeps its BatchNormalization nodes: the quantiser folds them into the Convs first.
  EXPECT_EQ(infer::quantize_onnx_static(kOnnx / "resnet18_opset13.onnx", path("r.onnx"), {rx}, q)
                .folded_batch_norms,
            20);
  InferenceSession resnet(path("r.onnx"), int8_conv);
  const Tensor a = resnet.run({rx})[0];
  const Tensor b = InferenceSession(path("r.onnx"), plain).run({rx})[0];
  const ModelInfo rinfo = resnet.info({rx.shape()});
  EXPECT_EQ(rinfo.ops_planned.at("cpudl.Int8Conv"), 20);
  // Each block's first convolution hands uint8 to the second (8 blocks), the first layer hands
  // uint8 to the max pool and it to layer1, and every block but the last writes its output in
  // uint8 with its residual added in uint8 (6): the downsample blocks' residual branches through
  // the QDQ pair the quantiser gives them. The last block writes f32 for the pool, so its
  // residual is f32 too, and layer4's downsample keeps its pair, run as operators. The residual
  // Adds and ReLUs ride in the second convolutions' epilogues.
  EXPECT_EQ(rinfo.ops_planned.count("Add") + rinfo.ops_planned.count("Relu"), 0u);
  EXPECT_EQ(rinfo.ops_planned.at("QuantizeLinear"), 1);
  EXPECT_EQ(rinfo.ops_planned.at("DequantizeLinear"), 1);
  bool kept_uint8 = false;
  for (const auto& line : rinfo.rewrites)
    kept_uint8 = kept_uint8 ||
                 (line.rfind("17 int8 convolution output(s) stay uint8", 0) == 0 &&
                  line.find("6 residual(s) added from uint8, 1 max pool(s) on uint8") != std::string::npos);
  EXPECT_TRUE(kept_uint8);
  double worst = 0, mean = 0, scale = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(a.data()[i]) - b.data()[i]);
    worst = std::max(worst, d);
    mean += d / static_cast<double>(a.numel());
    scale = std::max(scale, static_cast<double>(std::fabs(b.data()[i])));
  }
  EXPECT_LT(worst, 5e-2 * scale);
  EXPECT_LT(mean, 1e-2 * scale);
  // Folded and quantised, still PyTorch's model: within int8's error of its float output (a
  // wrong fold costs the whole scale).
  const Tensor golden = io::load_npy(kOnnx / "resnet18_opset13.output.npy");
  double off = 0, golden_scale = 0;
  for (std::int64_t i = 0; i < golden.numel(); ++i) {
    off = std::max(off, std::fabs(static_cast<double>(b.data()[i]) - golden.data()[i]));
    golden_scale = std::max(golden_scale, static_cast<double>(std::fabs(golden.data()[i])));
  }
  EXPECT_LT(off, 0.1 * golden_scale);
}

}  // namespace
