// The ONNX inference runtime against PyTorch: every model of tests/onnx/ (written by
// scripts/gen-onnx-fixtures.py with torch.onnx.export) must reproduce PyTorch's output, with and
// without the optimiser; plus the loader's and the session's answers to bad files and inputs.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <latch>
#include <thread>

#include "allocation_counter.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "cpudl/ops.h"
#include "dense/onednn/dense.h"
#include "infer/onnx_loader.h"

namespace {

namespace fs = std::filesystem;
const fs::path kOnnx = fs::path(CPUDL_FIXTURES_DIR) / ".." / "onnx";

// max |a - b| / max |b|: error relative to the output's scale.
double relative_error(const cpudl::Tensor& a, const cpudl::Tensor& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, scale = 1e-12;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
  }
  return diff / scale;
}

class MatchesPyTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(MatchesPyTorch, OptimisedAndUnoptimised) {
  const std::string stem = GetParam();
  const cpudl::Tensor x = cpudl::io::load_npy(kOnnx / (stem + ".input.npy"));
  const cpudl::Tensor expected = cpudl::io::load_npy(kOnnx / (stem + ".output.npy"));
  for (bool optimize : {true, false}) {
    cpudl::InferenceSession session(kOnnx / (stem + ".onnx"), {optimize, false});
    const auto y = session.run({x});
    ASSERT_EQ(y.size(), 1u);
    ASSERT_EQ(y[0].shape(), expected.shape());
    EXPECT_LT(relative_error(y[0], expected), 1e-4) << stem << (optimize ? " optimised" : " unoptimised");
    // A second run reuses the plan and must give the same numbers.
    EXPECT_EQ(session.run({x})[0].to_vector(), y[0].to_vector());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MatchesPyTorch,
                         ::testing::Values("opzoo_opset11", "opzoo_opset12", "opzoo_opset13", "opzoo_opset14",
                                           "opzoo_opset15", "opzoo_opset16", "opzoo_opset17",
                                           "simplecnn_opset13", "simplecnn_opset17", "lenet5_opset13",
                                           "lenet5_opset17", "mlp_opset13", "mlp_opset17",
                                           "transformer_opset13", "transformer_opset17", "resnet18_opset13",
                                           "mobilenet_v2_opset17"));

// Two sessions of one process, each with its own thread count, running at the same time (a
// server, a Python thread pool). OpenMP keeps a pool of worker threads per calling thread, so the
// threads of the process show what each session really started: the session on 2 threads one
// worker, the session on 1 none. A count taken from a process-wide setting gives one of them the
// other's count. Both must still match PyTorch.
int process_threads() {
  return static_cast<int>(std::distance(fs::directory_iterator("/proc/self/task"), fs::directory_iterator{}));
}

TEST(Inference, TwoSessionsRunAtOnceEachOnItsOwnThreadCount) {
  const cpudl::Tensor x = cpudl::io::load_npy(kOnnx / "mobilenet_v2_opset17.input.npy");
  const cpudl::Tensor expected = cpudl::io::load_npy(kOnnx / "mobilenet_v2_opset17.output.npy");
  cpudl::InferenceOptions one, two;
  one.threads = 1;
  two.threads = 2;
  cpudl::InferenceSession single(kOnnx / "mobilenet_v2_opset17.onnx", one);
  cpudl::InferenceSession pair(kOnnx / "mobilenet_v2_opset17.onnx", two);
  const int before = process_threads();
  std::latch ran(2), release(1);
  double errors[2] = {1, 1};
  auto serve = [&](cpudl::InferenceSession& session, double& error) {
    for (int i = 0; i < 3; ++i) error = std::min(error, relative_error(session.run({x})[0], expected));
    ran.count_down();
    release.wait();  // keeps this thread, and its OpenMP workers, alive while they are counted
  };
  std::thread a(serve, std::ref(single), std::ref(errors[0])), b(serve, std::ref(pair), std::ref(errors[1]));
  ran.wait();
  const int started = process_threads() - before;
  release.count_down();
  a.join();
  b.join();
  EXPECT_EQ(started, 3) << "the two callers and the 2-thread session's one OpenMP worker";
  EXPECT_LT(errors[0], 1e-4);
  EXPECT_LT(errors[1], 1e-4);
  EXPECT_THROW(cpudl::InferenceSession(kOnnx / "lenet5_opset17.onnx", {true, false, false, -1}),
               cpudl::UsageError);
}

// InferenceOptions::bf16: every convolution and matrix product computes in bf16 on oneDNN (the
// plan names a bf16 implementation), the outputs stay within bf16's rounding of PyTorch's f32 ones
// and differ from cpudl's own f32 outputs (so bf16 really ran); on a CPU without AVX512-BF16 or AMX
// (ctest runs this suite again under CPUDL_ISA=avx2) the session refuses, naming what is missing.
TEST(Inference, Bf16PrecisionRunsEveryProductInBf16NearTheF32Outputs) {
  if (!cpudl::onednn::bf16_compute_available()) {
    try {
      cpudl::InferenceOptions bf16;
      bf16.bf16 = true;
      cpudl::InferenceSession session(kOnnx / "resnet18_opset13.onnx", bf16);
      ADD_FAILURE() << "a bf16 session started without bf16 units";
    } catch (const cpudl::Error& e) {
      EXPECT_NE(std::string(e.what()).find("neither AVX512-BF16 nor AMX"), std::string::npos) << e.what();
    }
    GTEST_SKIP() << "no AVX512-BF16 or AMX here: checked the refusal only";
  }
  for (const char* stem :
       {"resnet18_opset13", "mobilenet_v2_opset17", "mlp_opset17", "transformer_opset17"}) {
    const cpudl::Tensor x = cpudl::io::load_npy(kOnnx / (std::string(stem) + ".input.npy"));
    const cpudl::Tensor expected = cpudl::io::load_npy(kOnnx / (std::string(stem) + ".output.npy"));
    for (bool optimize : {true, false}) {
      cpudl::InferenceOptions options;
      options.optimize = optimize;
      options.bf16 = true;
      cpudl::InferenceSession session(kOnnx / (std::string(stem) + ".onnx"), options);
      const auto y = session.run({x});
      ASSERT_EQ(y[0].shape(), expected.shape()) << stem;
      const double error = relative_error(y[0], expected);
      EXPECT_LT(error, 3e-2) << stem << (optimize ? " optimised" : " unoptimised");
      cpudl::InferenceSession f32(kOnnx / (std::string(stem) + ".onnx"), {optimize, false});
      EXPECT_GT(relative_error(y[0], f32.run({x})[0]), 1e-5) << stem << ": bf16 gave the f32 numbers";
      std::vector<cpudl::Shape> shapes{x.shape()};
      for (const auto& n : session.info(shapes).implementations) {
        if (n.op == "Conv") {  // onednn_bf16, or conv_as_linear_bf16 for kernels covering the whole map
          EXPECT_TRUE(n.implementation.ends_with("_bf16"))
              << stem << " " << n.node << ": " << n.implementation;
        }
      }
    }
  }
}

// A step with too little work to pay for a parallel region runs on the calling thread alone
// (plan.cpp's small_step): LeNet-5 on one image does, every step; on 256 images its convolutions
// are shared again. The numbers match PyTorch either way.
TEST(Inference, StepsTooSmallToShareRunOnTheCallingThread) {
  const cpudl::Tensor x = cpudl::io::load_npy(kOnnx / "lenet5_opset17.input.npy");
  const cpudl::Tensor expected = cpudl::io::load_npy(kOnnx / "lenet5_opset17.output.npy");
  cpudl::InferenceOptions options;
  options.threads = 2;
  options.profile = true;
  const auto conv = [](const cpudl::InferenceSession& session) {
    for (const auto& p : session.profile())
      if (p.op == "Conv") return p;
    return cpudl::OpProfile{};
  };
  cpudl::InferenceSession one(kOnnx / "lenet5_opset17.onnx", options);
  const cpudl::Tensor image = x.slice(0, 0, 1).contiguous();
  EXPECT_LT(relative_error(one.run({image})[0], expected.slice(0, 0, 1).contiguous()), 1e-4);
  EXPECT_EQ(conv(one).calls, 2);
  EXPECT_EQ(conv(one).alone_calls, 2);
  cpudl::InferenceSession many(kOnnx / "lenet5_opset17.onnx", options);
  std::vector<cpudl::Tensor> copies(256 / x.shape()[0] + 1, x);
  const cpudl::Tensor batch = cpudl::concat(copies, 0).slice(0, 0, 256).contiguous();
  const cpudl::Tensor out = many.run({batch})[0];
  EXPECT_LT(relative_error(out.slice(0, 0, x.shape()[0]).contiguous(), expected), 1e-4);
  EXPECT_EQ(conv(many).calls, 2);
  EXPECT_EQ(conv(many).alone_calls, 0);
}

TEST(Inference, EachBatchSizeGetsItsOwnPlanAndTheSameRows) {
  cpudl::InferenceSession session(kOnnx / "resnet18_opset13.onnx");
  const cpudl::Tensor x = cpudl::io::load_npy(kOnnx / "resnet18_opset13.input.npy");  // batch 2
  const cpudl::Tensor expected = cpudl::io::load_npy(kOnnx / "resnet18_opset13.output.npy");
  const auto one = session.run({x.slice(0, 1, 2).contiguous()});
  ASSERT_EQ(one[0].shape(), (cpudl::Shape{1, 1000}));
  EXPECT_LT(relative_error(one[0], expected.slice(0, 1, 2).contiguous()), 1e-4);
  EXPECT_LT(relative_error(session.run({x})[0], expected), 1e-4);
}

TEST(Inference, OptimiserFoldsAndFusesAndThePlanReusesMemory) {
  cpudl::InferenceSession resnet(kOnnx / "resnet18_opset13.onnx");
  const cpudl::ModelInfo info = resnet.info({{4, 3, 64, 64}});
  EXPECT_EQ(info.rewrite_counts.at("folded BatchNormalization"), 20);
  EXPECT_EQ(info.rewrite_counts.at("fused Conv epilogue"), 17);  // 17 ReLUs, 8 of them with the residual Add
  EXPECT_EQ(info.ops_planned.count("BatchNormalization"), 0u);
  EXPECT_EQ(info.ops_planned.count("Relu"), 0u);
  EXPECT_EQ(info.ops_planned.count("Add"), 0u);
  EXPECT_EQ(info.ops_planned.at("Conv"), 20);
  EXPECT_EQ(info.ops_loaded.at("BatchNormalization"), 20);
  EXPECT_LT(info.arena_bytes, info.unplanned_bytes / 2);
  // torchvision's resnet18 at 64x64: 1.82 GFLOP per 224x224 image scales by (64/224)^2 (+ the fc layer).
  EXPECT_NEAR(info.flops / 4, 2 * 0.1486e9, 0.02e9);

  cpudl::InferenceSession mobilenet(kOnnx / "mobilenet_v2_opset17.onnx");
  const cpudl::ModelInfo m = mobilenet.info({{1, 3, 64, 64}});
  EXPECT_EQ(m.ops_planned.count("Clip"), 0u);  // ReLU6 rides in the convolutions
  // Every inverted residual block but the first (which has no expansion) runs its 1x1 expansion
  // and depthwise convolution as one kernel; the FLOPs counted do not change. The fusion needs
  // the blocked layout, which MobileNet's channel counts (24, 40, 80...) fill only in 8-channel
  // blocks (AVX2); with AVX-512's 16 the network runs channels-last, unfused (ctest runs this
  // suite again with CPUDL_ISA=avx2, so both cases are checked on an AVX-512 machine).
  const bool blocked = cpudl::onednn::blocked_layout_channels() == 8;
  const int fused = blocked ? 16 : 0;
  EXPECT_EQ(m.rewrite_counts.count("fused depthwise Conv") ? m.rewrite_counts.at("fused depthwise Conv") : 0,
            fused);
  EXPECT_EQ(m.ops_planned.count("cpudl.ConvDepthwise") ? m.ops_planned.at("cpudl.ConvDepthwise") : 0, fused);
  EXPECT_EQ(m.ops_planned.at("Conv"), 52 - 2 * fused);
  cpudl::InferenceSession plain_mobilenet(kOnnx / "mobilenet_v2_opset17.onnx", {false, false});
  EXPECT_NEAR(m.flops, plain_mobilenet.info({{1, 3, 64, 64}}).flops, 1e-9 * m.flops);
  cpudl::InferenceSession transformer(kOnnx / "transformer_opset13.onnx");
  const cpudl::ModelInfo t = transformer.info({{2, 10, 64}});
  EXPECT_EQ(t.rewrite_counts.at("fused GELU"), 2);
  EXPECT_EQ(t.ops_planned.count("Shape"), 0u);  // the exporter's shape arithmetic is folded
  EXPECT_EQ(t.ops_planned.count("Erf"), 0u);
}

TEST(Inference, SteadyStateRunsAllocateNothing) {
  for (const char* stem : {"resnet18_opset13", "transformer_opset17", "mobilenet_v2_opset17"}) {
    cpudl::InferenceSession session(kOnnx / (std::string(stem) + ".onnx"));
    const cpudl::Tensor x = cpudl::io::load_npy(kOnnx / (std::string(stem) + ".input.npy"));
    std::vector<cpudl::Tensor> y = session.run({x});  // compiles the plan, creates the primitives
    const std::vector<cpudl::Tensor> inputs = {x};
    session.run_into(inputs, y);
    const auto counted = cpudl::testing::count_allocations([&] {
      for (int i = 0; i < 3; ++i) session.run_into(inputs, y);
    });
    EXPECT_EQ(counted.ours, 0) << stem << " (oneDNN's own: " << counted.onednn << ")";
    EXPECT_LT(relative_error(y[0], cpudl::io::load_npy(kOnnx / (std::string(stem) + ".output.npy"))), 1e-4);
  }
  cpudl::InferenceSession session(kOnnx / "lenet5_opset13.onnx");
  std::vector<cpudl::Tensor> wrong = {cpudl::Tensor::zeros({3, 11})};
  EXPECT_THROW(session.run_into({cpudl::io::load_npy(kOnnx / "lenet5_opset13.input.npy")}, wrong),
               cpudl::Error);
}

TEST(Inference, WrongInputsAreNamed) {
  cpudl::InferenceSession session(kOnnx / "simplecnn_opset13.onnx");
  try {
    session.run({cpudl::Tensor::zeros({2, 1, 27, 28})});
    FAIL() << "no error";
  } catch (const cpudl::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "input 'input' has shape [2, 1, 27, 28], the model expects [?, 1, 28, 28]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(session.run({cpudl::Tensor::zeros({2, 1, 28, 28}, cpudl::DType::i64)}), cpudl::Error);
  EXPECT_THROW(session.run({}), cpudl::Error);
}

// ---- the loader against bad files, built with the ONNX protobuf API

onnx::ModelProto tiny_model(std::int64_t opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  for (int i = 0; i < 4; ++i) w->add_float_data(static_cast<float>(i));
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->set_name("add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  g->add_output()->set_name("y");
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m;
}

std::string load_error(const onnx::ModelProto& m, const fs::path& dir = ".") {
  try {
    cpudl::infer::parse_onnx(m.SerializeAsString(), "m.onnx", dir);
  } catch (const cpudl::Error& e) {
    return e.what();
  }
  return "";
}

TEST(OnnxLoader, TinyModelRuns) {
  const fs::path path = fs::path(::testing::TempDir()) / "cpudl_tiny.onnx";
  std::ofstream(path, std::ios::binary) << tiny_model().SerializeAsString();
  cpudl::InferenceSession s(path);
  const auto y = s.run({cpudl::Tensor::from_vector({1, 1, 1, 1}, {4})});
  EXPECT_EQ(y[0].to_vector(), (std::vector<float>{1, 2, 3, 4}));
  fs::remove(path);
}

TEST(OnnxLoader, TruncatedAndGarbageFiles) {
  const std::string bytes = cpudl::io::read_file(kOnnx / "lenet5_opset13.onnx");
  for (const std::string& broken :
       {bytes.substr(0, bytes.size() / 2), std::string("definitely not onnx"), std::string()}) {
    try {
      cpudl::infer::parse_onnx(broken, "broken.onnx", ".");
      FAIL() << "parsed";
    } catch (const cpudl::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("broken.onnx: ", 0), 0u) << e.what();
    }
  }
}

TEST(OnnxLoader, EveryUnsupportedOperatorIsListedWithItsNodeAndOpset) {
  auto m = tiny_model();
  for (const char* op : {"Einsum", "Scan"}) {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(std::string("my_") + op);
    n->add_input("y");
    n->add_output(std::string("z_") + op);
  }
  const std::string e = load_error(m);
  EXPECT_NE(e.find("2 unsupported operator(s) at opset 13"), std::string::npos) << e;
  EXPECT_NE(e.find("Einsum in node 'my_Einsum'"), std::string::npos) << e;
  EXPECT_NE(e.find("Scan in node 'my_Scan'"), std::string::npos) << e;
}

TEST(OnnxLoader, OpsetOutsideTheSupportedRange) {
  EXPECT_NE(load_error(tiny_model(9)).find("opset 9 is not supported (cpudl runs opsets 11 to 17)"),
            std::string::npos);
  EXPECT_NE(load_error(tiny_model(18)).find("opset 18"), std::string::npos);
}

TEST(OnnxLoader, TensorDataThatDisagreesWithItsShape) {
  auto m = tiny_model();
  m.mutable_graph()->mutable_initializer(0)->add_dims(2);  // [4, 2] but 4 floats
  const std::string e = load_error(m);
  EXPECT_NE(e.find("initializer 'w': data holds 16 bytes but shape [4, 2] of f32 needs 32"),
            std::string::npos)
      << e;
  auto raw = tiny_model();
  auto* w = raw.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_raw_data(std::string(15, '\0'));
  EXPECT_NE(load_error(raw).find("data holds 15 bytes"), std::string::npos);
  auto type = tiny_model();
  type.mutable_graph()->mutable_initializer(0)->set_data_type(onnx::TensorProto::COMPLEX64);
  EXPECT_NE(load_error(type).find("element type COMPLEX64 is not supported"), std::string::npos);
}

TEST(OnnxLoader, CyclesAndUndefinedInputs) {
  auto cycle = tiny_model();
  auto* g = cycle.mutable_graph();
  g->mutable_node(0)->set_input(0, "b");
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->set_name("loop_back");
  n->add_input("y");
  n->add_output("b");
  EXPECT_NE(load_error(cycle).find("the graph has a cycle"), std::string::npos) << load_error(cycle);
  auto undefined = tiny_model();
  undefined.mutable_graph()->mutable_node(0)->set_input(1, "nowhere");
  EXPECT_NE(load_error(undefined).find("Add node 'add': input 'nowhere' is not defined"), std::string::npos);
}

TEST(OnnxLoader, ExternalDataIsBoundsCheckedAndStaysInTheModelFolder) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("cpudl_ext_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "w.bin", std::ios::binary) << std::string(16, '\0');
  auto with_location = [](const std::string& location, const std::string& offset) {
    auto m = tiny_model();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_float_data();
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* e = w->add_external_data();
    e->set_key("location");
    e->set_value(location);
    auto* o = w->add_external_data();
    o->set_key("offset");
    o->set_value(offset);
    return m;
  };
  EXPECT_EQ(load_error(with_location("w.bin", "0"), dir), "");
  EXPECT_NE(load_error(with_location("w.bin", "8"), dir).find("lies beyond the end of"), std::string::npos);
  EXPECT_NE(load_error(with_location("../w.bin", "0"), dir)
                .find("must be a relative path inside the model's folder"),
            std::string::npos);
  EXPECT_NE(load_error(with_location("missing.bin", "0"), dir).find("cannot open external data file"),
            std::string::npos);
  EXPECT_NE(load_error(with_location("w.bin", "x"), dir).find("is not a number"), std::string::npos);
  fs::remove_all(dir);
}

TEST(OnnxLoader, ShapeArgumentsMustBeKnownBeforeTheRun) {
  // Reshape to a shape that is a graph input: cpudl plans shapes ahead, and says so.
  auto m = tiny_model();
  auto* g = m.mutable_graph();
  auto* s = g->add_input();
  s->set_name("shape");
  s->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  auto* n = g->mutable_node(0);
  n->set_op_type("Reshape");
  n->set_input(1, "shape");
  const fs::path path = fs::path(::testing::TempDir()) / "cpudl_reshape.onnx";
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  cpudl::InferenceSession session(path);
  try {
    session.run({cpudl::Tensor::zeros({4}), cpudl::Tensor::zeros({1}, cpudl::DType::i64)});
    FAIL() << "ran";
  } catch (const cpudl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Reshape node 'add': input 'shape' must be known before the run"),
              std::string::npos)
        << e.what();
  }
  fs::remove(path);
}

// m written to a file of its own in the test's temporary folder (the caller removes it).
fs::path write_temporary_model(const onnx::ModelProto& m, const std::string& stem) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("cpudl_" + stem + "_" + std::to_string(getpid()) + ".onnx");
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

// PyTorch exports a Linear layer on 3-D input as MatMul with B stored k x n, then Add: on one to
// eight rows it runs on the weight-row kernel over a copy of B transposed at plan time (the
// implementation says so), with the Add fused as its bias; checked against the double product at
// 1, 3 and 8 rows, and at 9, where oneDNN takes it again.
TEST(OnnxLoader, LinearOnThreeDimensionalInputTakesTheWeightRows) {
  const std::int64_t k = 300, n = 1500;
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  std::vector<float> weights(k * n), bias(n);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * static_cast<float>(i % 97);
  for (const auto& [name, values, dims] : {std::tuple{"w", &weights, std::vector<std::int64_t>{k, n}},
                                           std::tuple{"b", &bias, std::vector<std::int64_t>{n}}}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float f : *values) t->add_float_data(f);
  }
  auto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->set_name("fc");
  mm->add_input("x");
  mm->add_input("w");
  mm->add_output("h");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("h");
  add->add_input("b");
  add->add_output("y");
  g->add_output()->set_name("y");
  const fs::path path = write_temporary_model(m, "linear3d");
  cpudl::InferenceSession session(path);
  cpudl::Generator gen(5);
  for (const std::int64_t rows : {1, 3, 8, 9}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const cpudl::Tensor x = cpudl::Tensor::randn({1, rows, k}, gen);
    const auto y = session.run({x})[0].to_vector();
    const auto xv = x.to_vector();
    ASSERT_EQ(y.size(), static_cast<std::size_t>(rows * n));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < n; ++j) {
        double ref = bias[j], scale = std::fabs(bias[j]);
        for (std::int64_t i = 0; i < k; ++i) {
          ref += static_cast<double>(xv[r * k + i]) * weights[i * n + j];
          scale += std::fabs(static_cast<double>(xv[r * k + i]) * weights[i * n + j]);
        }
        ASSERT_NEAR(y[r * n + j], ref, 1e-5 * scale) << r << " " << j;
      }
    std::string how;
    for (const auto& node : session.info({{1, rows, k}}).implementations)
      if (node.op == "MatMul") how = node.implementation;
    EXPECT_EQ(how.starts_with("weight_rows"), rows <= 8) << how;
  }
  fs::remove(path);
}

TEST(OnnxLoader, LayoutReordersAroundTheConvolutionRegionKeepTheNumbers) {
  // x [2, 16, 5, 3] -> 1x1 Conv 16 -> 16 (+ bias) -> Flatten: the input enters the blocked (or
  // NHWC) region through a reorder and leaves it through another before Flatten.
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  const std::int64_t n = 2, c = 16, h = 5, w = 3;
  std::vector<float> weights(c * c), bias(c);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * static_cast<float>(i);
  auto add_init = [&](const char* name, const std::vector<float>& v, std::vector<std::int64_t> dims) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float f : v) t->add_float_data(f);
  };
  add_init("w", weights, {c, c, 1, 1});
  add_init("b", bias, {c});
  auto* conv = g->add_node();
  conv->set_op_type("Conv");
  conv->add_input("x");
  conv->add_input("w");
  conv->add_input("b");
  conv->add_output("c");
  auto* flat = g->add_node();
  flat->set_op_type("Flatten");
  flat->add_input("c");
  flat->add_output("y");
  g->add_output()->set_name("y");
  const fs::path path = write_temporary_model(m, "layout");
  cpudl::InferenceSession session(path);
  cpudl::Generator gen(3);
  const cpudl::Tensor x = cpudl::Tensor::randn({n, c, h, w}, gen);
  const auto y = session.run({x})[0].to_vector();
  const auto xv = x.to_vector();
  ASSERT_EQ(y.size(), static_cast<std::size_t>(n * c * h * w));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t o = 0; o < c; ++o)
      for (std::int64_t p = 0; p < h * w; ++p) {
        float ref = bias[o];
        for (std::int64_t i = 0; i < c; ++i) ref += weights[o * c + i] * xv[(b * c + i) * h * w + p];
        ASSERT_NEAR(y[(b * c + o) * h * w + p], ref, 1e-4) << b << " " << o << " " << p;
      }
  const auto rewrites = session.info({{n, c, h, w}}).rewrites;  // one reorder in, one before the Flatten
  EXPECT_NE(std::find(rewrites.begin(), rewrites.end(),
                      "2 reorder(s) at the edges of the blocked (nChw" +
                          std::to_string(cpudl::onednn::blocked_layout_channels()) + "c) region"),
            rewrites.end());
  fs::remove(path);
}

}  // namespace
