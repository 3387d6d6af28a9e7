// ONNX Loop through the runtime: PyTorch's export of scripted loops (tests/onnx/detect/loops_opset13,
// from scripts/gen-detect-fixtures.py) against PyTorch's outputs, and hand-built loops covering
// every combination of trip count and condition the specification defines, with scan outputs and
// outer-scope values, against a plain C++ loop computing the same; plus the refusals (a loop that
// never ends, carried values that change shape).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_sandbox.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "infer/onnx_build.h"

namespace {

namespace fs = std::filesystem;
using cpudl::infer::make_node;
using cpudl::infer::make_tensor;
const fs::path kDetect = fs::path(CPUDL_FIXTURES_DIR) / ".." / "onnx" / "detect";

TEST(Loop, PyTorchsScriptedForAndWhileLoopsMatchPyTorch) {
  for (bool optimize : {true, false}) {
    cpudl::InferenceSession session(kDetect / "loops_opset13.onnx", {optimize, false});
    EXPECT_EQ(session.info({{5, 3, 4}, {}}).ops_loaded.at("Loop"), 2);
    for (int c = 0; c < 3; ++c) {
      const std::string stem = "loops_opset13.case" + std::to_string(c);
      const auto y = session.run({cpudl::io::load_npy(kDetect / (stem + ".input0.npy")),
                                  cpudl::io::load_npy(kDetect / (stem + ".input1.npy"))});
      const cpudl::Tensor h = cpudl::io::load_npy(kDetect / (stem + ".output0.npy")),
                          k = cpudl::io::load_npy(kDetect / (stem + ".output1.npy"));
      ASSERT_EQ(y.size(), 2u);
      ASSERT_EQ(y[0].shape(), h.shape()) << stem;
      const auto got = y[0].to_vector(), want = h.to_vector();
      for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-5) << stem << " h[" << i << "]";
      ASSERT_EQ(y[1].dtype(), cpudl::DType::i64);
      EXPECT_EQ(*static_cast<const std::int64_t*>(y[1].raw_data()),
                *static_cast<const std::int64_t*>(k.raw_data()))
          << stem << " (the while loop's count)";
    }
  }
}

// A loop over `acc` (f32 [3]), reading x and `last` from the outer graph:
//   for t in 0..: acc += x * t; scan[t] = 2 * acc; continue while t < last (the body's condition)
// `trip`: "input" (a graph input M), "constant" (an initializer), or "" (none); `condition`: the
// node's condition input given (true) or omitted. `grow`: the body returns Concat(acc, acc).
struct LoopModel {
  std::string trip = "input";
  bool condition = true, grow = false;
  std::int64_t constant_trip = 4;
};

void add_input(onnx::GraphProto* g, const std::string& name, int type, std::vector<std::int64_t> dims) {
  auto* v = g->add_input();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(type);
  auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
  for (std::int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

fs::path write_loop_model(const LoopModel& spec) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(16);
  auto* g = m.mutable_graph();
  g->set_name("loops");
  if (spec.trip == "input") add_input(g, "M", onnx::TensorProto::INT64, {});
  add_input(g, "x", onnx::TensorProto::FLOAT, {3});
  add_input(g, "last", onnx::TensorProto::INT64, {});
  const float zeros[3] = {0, 0, 0};
  *g->add_initializer() = make_tensor("acc0", onnx::TensorProto::FLOAT, {3}, zeros, sizeof zeros);
  const bool yes = true;
  *g->add_initializer() = make_tensor("true", onnx::TensorProto::BOOL, {}, &yes, 1);
  if (spec.trip == "constant")
    *g->add_initializer() =
        make_tensor("M", onnx::TensorProto::INT64, {}, &spec.constant_trip, sizeof spec.constant_trip);

  onnx::GraphProto body;
  body.set_name("body");
  add_input(&body, "t", onnx::TensorProto::INT64, {});
  add_input(&body, "cond_in", onnx::TensorProto::BOOL, {});
  add_input(&body, "acc", onnx::TensorProto::FLOAT, {3});
  const float two = 2;
  *body.add_initializer() = make_tensor("two", onnx::TensorProto::FLOAT, {}, &two, sizeof two);
  auto cast = make_node("Cast", "cast", {"t"}, {"t_f"});
  cpudl::infer::set_int_attribute(cast, "to", onnx::TensorProto::FLOAT);
  *body.add_node() = cast;
  *body.add_node() = make_node("Mul", "step", {"x", "t_f"}, {"step"});  // x: the outer graph's
  *body.add_node() = make_node("Add", "sum", {"acc", "step"}, {"acc_out"});
  *body.add_node() = make_node("Mul", "double", {"acc_out", "two"}, {"scan"});
  *body.add_node() = make_node("Less", "more", {"t", "last"}, {"cond_out"});  // last: the outer graph's
  std::string carried = "acc_out";
  if (spec.grow) {
    auto concat = make_node("Concat", "grow", {"acc_out", "acc_out"}, {"grown"});
    cpudl::infer::set_int_attribute(concat, "axis", 0);
    *body.add_node() = concat;
    carried = "grown";
  }
  for (const std::string& name : {std::string("cond_out"), carried, std::string("scan")})
    body.add_output()->set_name(name);

  auto loop =
      make_node("Loop", "the_loop", {spec.trip.empty() ? "" : "M", spec.condition ? "true" : "", "acc0"},
                {"acc_final", "scans"});
  auto* a = loop.add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = body;
  *g->add_node() = loop;
  g->add_output()->set_name("acc_final");
  g->add_output()->set_name("scans");
  const fs::path path =
      fs::path(::testing::TempDir()) / ("cpudl_loop_" + spec.trip + std::to_string(spec.condition) +
                                        std::to_string(spec.grow) + "_" + std::to_string(getpid()) + ".onnx");
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

cpudl::Tensor scalar(std::int64_t v) { return cpudl::Tensor::from_buffer(&v, {}, cpudl::DType::i64); }

// The reference: the same loop in C++. `trip` < 0: no trip count; `condition`: the body's
// condition decides.
void expect_loop(cpudl::InferenceSession& session, const std::vector<cpudl::Tensor>& inputs,
                 const std::vector<float>& x, std::int64_t trip, bool condition, std::int64_t last) {
  std::vector<float> acc(3, 0.0f), scans;
  std::int64_t t = 0;
  for (bool go = true; (trip < 0 || t < trip) && go; ++t) {
    for (int i = 0; i < 3; ++i) acc[i] += x[i] * static_cast<float>(t);
    for (int i = 0; i < 3; ++i) scans.push_back(2 * acc[i]);
    go = !condition || t < last;
  }
  const auto y = session.run(inputs);
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[0].to_vector(), acc);
  EXPECT_EQ(y[1].shape(), (cpudl::Shape{t, 3})) << "trip " << trip << " last " << last;
  EXPECT_EQ(y[1].to_vector(), scans);
}

TEST(Loop, TripCountAndConditionCombineAsTheSpecificationSays) {
  const std::vector<float> x{1.5f, -2.0f, 0.25f};
  const cpudl::Tensor xt = cpudl::Tensor::from_vector(x, {3});
  {  // M and the condition: a for loop that may end early; M read at run time
    const fs::path path = write_loop_model({"input", true});
    cpudl::InferenceSession session(path);
    for (const auto& [trip, last] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {5, 100}, {5, 2}, {0, 3}, {1, 0}, {7, 6}, {-1, 4}})
      expect_loop(session, {scalar(trip), xt, scalar(last)}, x, std::max<std::int64_t>(trip, 0), true, last);
    fs::remove(path);
  }
  {  // M alone: the body's condition is ignored
    const fs::path path = write_loop_model({"input", false});
    cpudl::InferenceSession session(path);
    for (const std::int64_t trip : {6, 2, 0})
      expect_loop(session, {scalar(trip), xt, scalar(0)}, x, trip, false, 0);
    fs::remove(path);
  }
  {  // the condition alone: a while loop
    const fs::path path = write_loop_model({"", true});
    cpudl::InferenceSession session(path);
    for (const std::int64_t last : {0, 3, 9}) expect_loop(session, {xt, scalar(last)}, x, -1, true, last);
    fs::remove(path);
  }
  {  // a constant M and no condition: exactly M iterations, outputs of a fixed shape
    const fs::path path = write_loop_model({"constant", false});
    cpudl::InferenceSession session(path);
    expect_loop(session, {xt, scalar(0)}, x, 4, false, 0);
    std::vector<cpudl::Tensor> out{cpudl::Tensor::empty({3}), cpudl::Tensor::empty({4, 3})};
    session.run_into({xt, scalar(0)}, out);  // no data-dependent shape: run_into takes it
    EXPECT_FLOAT_EQ(out[1].to_vector()[9], 2 * (1.5f * 6));
    fs::remove(path);
  }
}

TEST(Loop, ALoopThatNeverEndsStopsAtTheBoundWithItsNodeNamed) {
  const std::vector<float> x{1, 2, 3};
  const fs::path path = write_loop_model({"", false});  // neither M nor a condition: forever
  cpudl::InferenceOptions options;
  options.max_loop_iterations = 50;
  cpudl::InferenceSession session(path, options);
  try {
    session.run({cpudl::Tensor::from_vector(x, {3}), scalar(0)});
    FAIL() << "the loop ended";
  } catch (const cpudl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Loop node 'the_loop'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("still running after 50 iterations"), std::string::npos) << e.what();
  }
  // A while loop within the bound still runs (its scan planned for 50 rows).
  const fs::path bounded = write_loop_model({"", true});
  cpudl::InferenceSession within(bounded, options);
  expect_loop(within, {cpudl::Tensor::from_vector(x, {3}), scalar(48)}, x, -1, true, 48);
  EXPECT_THROW(within.run({cpudl::Tensor::from_vector(x, {3}), scalar(50)}), cpudl::Error);
  // A constant trip count over the bound is refused when the plan is made.
  const fs::path constant = write_loop_model({"constant", false, false, 80});
  cpudl::InferenceSession over(constant, options);
  try {
    over.run({cpudl::Tensor::from_vector(x, {3}), scalar(0)});
    FAIL() << "80 iterations ran under a bound of 50";
  } catch (const cpudl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs 80 iterations, more than the 50 allowed"), std::string::npos)
        << e.what();
  }
  for (const auto& p : {path, bounded, constant}) fs::remove(p);
}

TEST(Loop, CarriedValuesThatChangeShapeAreRefusedByName) {
  const fs::path path = write_loop_model({"input", true, true});
  cpudl::InferenceSession session(path);
  try {
    session.run({scalar(3), cpudl::Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}), scalar(9)});
    FAIL() << "a growing carried value was accepted";
  } catch (const cpudl::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("loop-carried value 'acc' enters as [3] and leaves an iteration as [6]"),
              std::string::npos)
        << what;
  }
  fs::remove(path);
}

}  // namespace

namespace {

using LoopCli = cpudl::testing::CliSandbox;

TEST_F(LoopCli, RunEndsALoopThatNeverEndsWithOneLineAndExitOne) {
  const fs::path model = write_loop_model({"", false});
  cpudl::io::save_npy(path("x.npy"), cpudl::Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}));
  cpudl::io::save_npy(path("last.npy"), scalar(0));
  const std::string args =
      "run " + model.string() + " --input " + path("x.npy") + " --input " + path("last.npy");
  const auto stopped =
      run(args + " --max-loop-iterations 30 --output " + path("a.npy") + " --output " + path("s.npy"));
  EXPECT_EQ(stopped.exit_code, 1);
  EXPECT_EQ(
      stopped.err,
      "cpudl: error: Loop node 'the_loop': still running after 30 iterations (--max-loop-iterations sets "
      "the bound)\n");
  EXPECT_FALSE(fs::exists(path("a.npy")));
  const auto info = run("info " + model.string() + " --max-loop-iterations 30");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("Loop 1"), std::string::npos) << info.out;
  fs::remove(model);
}

}  // namespace
