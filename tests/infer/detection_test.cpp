// Detectors through the ONNX runtime: the YOLOv5s-style fixtures of tests/onnx/detect/ (written by
// scripts/gen-detect-fixtures.py from PyTorch 1.13) against PyTorch's boxes, scores and labels;
// NonMaxSuppression against the ONNX specification's own cases and a brute-force reference; and
// the planner's data-dependent sizes (bounded values, If branches of different sizes, no
// detections at all).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "infer/nms.h"

namespace {

namespace fs = std::filesystem;
const fs::path kDetect = fs::path(CPUDL_FIXTURES_DIR) / ".." / "onnx" / "detect";

// A result's values as doubles, float or int64 alike.
std::vector<double> values(const cpudl::Tensor& t) {
  const cpudl::Tensor c = t.contiguous();
  const std::int64_t n = cpudl::shape_numel(c.shape());
  std::vector<double> v;
  for (std::int64_t i = 0; i < n; ++i) {
    if (c.dtype() == cpudl::DType::i64)
      v.push_back(static_cast<double>(static_cast<const std::int64_t*>(c.raw_data())[i]));
    else
      v.push_back(static_cast<const float*>(c.raw_data())[i]);
  }
  return v;
}

// max |a - b| / max |b| over every element.
double relative_error(const cpudl::Tensor& a, const cpudl::Tensor& b) {
  const auto x = values(a), y = values(b);
  EXPECT_EQ(x.size(), y.size());
  double diff = 0, scale = 1e-12;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
  }
  return diff / scale;
}

std::vector<cpudl::Tensor> expected_outputs(const std::string& stem) {
  std::vector<cpudl::Tensor> out;
  for (int k = 0; fs::exists(kDetect / (stem + ".output" + std::to_string(k) + ".npy")); ++k)
    out.push_back(cpudl::io::load_npy(kDetect / (stem + ".output" + std::to_string(k) + ".npy")));
  if (out.empty()) out.push_back(cpudl::io::load_npy(kDetect / (stem + ".output.npy")));
  return out;
}

// Same number of detections, labels identical, boxes and scores within 1e-4 of their scale. (The
// fixtures' scores are far enough apart that NMS visits them in one order: no set comparison is
// needed; a tie would show here as a label or box mismatch.)
class DetectorMatchesPyTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(DetectorMatchesPyTorch, OptimisedAndUnoptimised) {
  const std::string stem = GetParam();
  std::vector<cpudl::Tensor> x = {cpudl::io::load_npy(kDetect / (stem + ".input.npy"))};
  if (fs::exists(kDetect / (stem + ".input1.npy")))
    x.push_back(cpudl::io::load_npy(kDetect / (stem + ".input1.npy")));
  const auto expected = expected_outputs(stem);
  for (bool optimize : {true, false}) {
    cpudl::InferenceSession session(kDetect / (stem + ".onnx"), {optimize, false});
    const auto y = session.run(x);
    ASSERT_EQ(y.size(), expected.size());
    for (std::size_t k = 0; k < y.size(); ++k) {
      ASSERT_EQ(y[k].shape(), expected[k].shape()) << stem << " output " << k;
      ASSERT_EQ(y[k].dtype(), expected[k].dtype()) << stem << " output " << k;
      if (y[k].dtype() == cpudl::DType::i64)
        EXPECT_EQ(values(y[k]), values(expected[k])) << stem << " labels";
      else
        EXPECT_LT(relative_error(y[k], expected[k]), 1e-4)
            << stem << " output " << k << (optimize ? " optimised" : "");
    }
    // A second run reuses the plan (and its kernels rebuilt for this run's sizes).
    const auto again = session.run(x);
    for (std::size_t k = 0; k < y.size(); ++k) EXPECT_EQ(values(again[k]), values(y[k]));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DetectorMatchesPyTorch,
                         ::testing::Values("yolo_tiny_raw_opset17", "yolo_tiny_nms_opset11",
                                           "yolo_tiny_nms_opset17", "detect_ops_opset11",
                                           "detect_ops_opset17", "neck_opset17", "detect_ops2_opset11",
                                           "ssdlite_opset11", "fasterrcnn_opset11", "retinanet_opset11"));

TEST(Detection, SiluFusesIntoTheConvolutionsAndConcatResizeStayInTheRegion) {
  cpudl::InferenceSession session(kDetect / "yolo_tiny_raw_opset17.onnx");
  const cpudl::ModelInfo info = session.info({{1, 3, 128, 128}});
  EXPECT_EQ(info.ops_loaded.at("Sigmoid"), 60);
  // Every Conv-BN-SiLU (57 of the 60 convolutions; the heads' three have a plain Sigmoid after a
  // Reshape) leaves no Sigmoid and no Mul of its own; the bottlenecks' residual Adds, which come
  // after the SiLU, stay Adds (an epilogue adds its residual before the activation).
  EXPECT_EQ(info.ops_planned.at("Sigmoid"), 3);
  EXPECT_EQ(info.rewrite_counts.at("fused Conv epilogue"), 57);
  EXPECT_EQ(info.ops_planned.at("Add"), 7 + 3);  // + the heads' grid offsets
  // Concat and Resize run channels-last: reorders only into the heads' reshapes and out.
  EXPECT_LE(info.ops_planned.at("cpudl.Reorder"), 4);
}

// The same model with its score threshold above every score: no candidates, torchvision's
// batched_nms takes its If's empty branch, and every output has 0 rows.
fs::path with_score_threshold(const std::string& stem, float threshold) {
  onnx::ModelProto m;
  std::ifstream in(kDetect / (stem + ".onnx"), std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in));
  std::string name;
  for (const auto& n : m.graph().node())
    if (n.op_type() == "Greater") name = n.input(1);
  EXPECT_FALSE(name.empty());
  bool set = false;
  for (auto& n : *m.mutable_graph()->mutable_node())
    if (n.op_type() == "Constant" && n.output(0) == name) {
      auto* t = n.mutable_attribute(0)->mutable_t();
      t->clear_raw_data();
      t->clear_float_data();
      t->add_float_data(threshold);
      set = true;
    }
  EXPECT_TRUE(set);
  const fs::path path = fs::path(::testing::TempDir()) / (stem + "_threshold.onnx");
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

TEST(Detection, NoDetectionsGiveEmptyOutputsAndTheNextRunItsOwn) {
  const cpudl::Tensor x = cpudl::io::load_npy(kDetect / "yolo_tiny_nms_opset17.input.npy");
  const fs::path none = with_score_threshold("yolo_tiny_nms_opset17", 2.0f);
  cpudl::InferenceSession empty(none);
  const auto y = empty.run({x});
  ASSERT_EQ(y.size(), 3u);
  EXPECT_EQ(y[0].shape(), (cpudl::Shape{0, 4}));
  EXPECT_EQ(y[1].shape(), (cpudl::Shape{0}));
  EXPECT_EQ(y[2].shape(), (cpudl::Shape{0}));
  fs::remove(none);

  // One session, inputs with different numbers of detections in turn: each run is sized by its
  // own data, and returning to the first input gives its first answer.
  cpudl::InferenceSession session(kDetect / "yolo_tiny_nms_opset17.onnx");
  const auto first = session.run({x});
  std::vector<float> flipped_pixels = x.to_vector();
  std::reverse(flipped_pixels.begin(), flipped_pixels.end());
  const auto flipped = session.run({cpudl::Tensor::from_vector(flipped_pixels, x.shape())});
  cpudl::InferenceSession fresh(kDetect / "yolo_tiny_nms_opset17.onnx");
  const auto flipped_fresh = fresh.run({cpudl::Tensor::from_vector(flipped_pixels, x.shape())});
  EXPECT_NE(flipped[1].shape(), first[1].shape());  // the inputs differ in their detections
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(flipped[k].shape(), flipped_fresh[k].shape());
    EXPECT_EQ(values(flipped[k]), values(flipped_fresh[k]));
  }
  const auto back = session.run({x});
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(values(back[k]), values(first[k]));

  // run_into needs outputs of known shape: a bounded one is named.
  std::vector<cpudl::Tensor> outputs = first;
  try {
    session.run_into({x}, outputs);
    FAIL() << "ran";
  } catch (const cpudl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data-dependent shape"), std::string::npos) << e.what();
  }
}

// ---- NonMaxSuppression: the ONNX operator's documented cases (onnx/defs/object_detection),
// through the shared function the operator and `cpudl detect` call.

struct NmsCase {
  std::vector<float> boxes;                // count x 4
  std::vector<std::vector<float>> scores;  // per class
};

const std::vector<float> kCornerBoxes = {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                         0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101};
const std::vector<float> kScores = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};

std::vector<std::int32_t> nms(const std::vector<float>& boxes, const std::vector<float>& scores,
                              cpudl::infer::NmsOptions options) {
  cpudl::infer::NmsScratch scratch;
  std::vector<std::int32_t> kept;
  const auto count = static_cast<std::int64_t>(scores.size());
  cpudl::infer::nms_prepare_boxes(boxes.data(), count, options.center_point_box, scratch);
  cpudl::infer::nms_one_class(scores.data(), count, options, scratch, kept);
  return kept;
}

TEST(NonMaxSuppression, TheOnnxSpecificationCases) {
  cpudl::infer::NmsOptions o;
  o.max_per_class = 3;
  o.iou_threshold = 0.5f;
  o.score_threshold = 0.0f;
  EXPECT_EQ(nms(kCornerBoxes, kScores, o), (std::vector<std::int32_t>{3, 0, 5}));  // suppress_by_IOU
  // center_point_box: the same boxes as centres and sizes
  const std::vector<float> centred = {0.5f, 0.5f,  1, 1, 0.5f, 0.6f,  1, 1, 0.5f, 0.4f,   1, 1,
                                      0.5f, 10.5f, 1, 1, 0.5f, 10.6f, 1, 1, 0.5f, 100.5f, 1, 1};
  auto c = o;
  c.center_point_box = true;
  EXPECT_EQ(nms(centred, kScores, c), (std::vector<std::int32_t>{3, 0, 5}));
  // flipped corners: any diagonal pair
  const std::vector<float> flipped = {1, 1,  0, 0,  0, 0.1f,  1, 1.1f,  0, 0.9f, 1, -0.1f,
                                      0, 10, 1, 11, 1, 10.1f, 0, 11.1f, 1, 101,  0, 100};
  EXPECT_EQ(nms(flipped, kScores, o), (std::vector<std::int32_t>{3, 0, 5}));
  // limit_output_size: 2 per class
  auto two = o;
  two.max_per_class = 2;
  EXPECT_EQ(nms(kCornerBoxes, kScores, two), (std::vector<std::int32_t>{3, 0}));
  // suppress_by_IOU_and_scores: score threshold 0.4 drops box 5 (0.3)
  auto scored = o;
  scored.score_threshold = 0.4f;
  EXPECT_EQ(nms(kCornerBoxes, kScores, scored), (std::vector<std::int32_t>{3, 0}));
  // identical_boxes: ten copies of one box, all scored 0.9 -> the first
  std::vector<float> same, nines(10, 0.9f);
  for (int i = 0; i < 10; ++i) same.insert(same.end(), {0, 0, 1, 1});
  EXPECT_EQ(nms(same, nines, o), (std::vector<std::int32_t>{0}));
  // single_box and max_output_boxes_per_class 0 (ONNX's default: nothing)
  EXPECT_EQ(nms({0, 0, 1, 1}, {0.9f}, o), (std::vector<std::int32_t>{0}));
  auto none = o;
  none.max_per_class = 0;
  EXPECT_TRUE(nms(kCornerBoxes, kScores, none).empty());
  // no score threshold: every box is a candidate (0.3 stays)
  auto all = o;
  all.score_threshold.reset();
  all.max_per_class = 10;
  EXPECT_EQ(nms(kCornerBoxes, kScores, all), (std::vector<std::int32_t>{3, 0, 5}));
}

// Against a brute force in double precision that compares every pair of boxes: random boxes in
// clusters (so that suppression happens), many sizes around the scan's 16-score blocks.
TEST(NonMaxSuppression, MatchesABruteForceReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0, 1);
  for (std::int64_t count : {1, 15, 16, 17, 100, 1000}) {
    std::vector<float> boxes, scores;
    for (std::int64_t i = 0; i < count; ++i) {
      const float cx = std::floor(u(rng) * 8) * 10 + u(rng) * 3,
                  cy = std::floor(u(rng) * 8) * 10 + u(rng) * 3;
      const float w = 2 + u(rng) * 6, h = 2 + u(rng) * 6;
      boxes.insert(boxes.end(), {cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2});
      scores.push_back(u(rng));
    }
    cpudl::infer::NmsOptions o;
    o.max_per_class = 1 << 20;
    o.iou_threshold = 0.3f;
    o.score_threshold = 0.2f;
    // Reference: order by (score desc, index asc); keep a box unless a kept one overlaps it more.
    std::vector<std::int32_t> order;
    for (std::int64_t i = 0; i < count; ++i)
      if (scores[static_cast<std::size_t>(i)] > 0.2f) order.push_back(static_cast<std::int32_t>(i));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int32_t a, std::int32_t b) { return scores[a] > scores[b]; });
    auto iou = [&](std::int32_t a, std::int32_t b) {
      const float* p = &boxes[static_cast<std::size_t>(a) * 4];
      const float* q = &boxes[static_cast<std::size_t>(b) * 4];
      const double ih = std::max(0.0, std::min<double>(p[2], q[2]) - std::max<double>(p[0], q[0]));
      const double iw = std::max(0.0, std::min<double>(p[3], q[3]) - std::max<double>(p[1], q[1]));
      const double inter = ih * iw;
      const double uni = double(p[2] - p[0]) * (p[3] - p[1]) + double(q[2] - q[0]) * (q[3] - q[1]) - inter;
      return inter / uni;
    };
    std::vector<std::int32_t> expected;
    for (std::int32_t c : order) {
      bool keep = true;
      for (std::int32_t k : expected) keep = keep && iou(k, c) <= 0.3;
      if (keep) expected.push_back(c);
    }
    EXPECT_EQ(nms(boxes, scores, o), expected) << count << " boxes";
  }
}

// ---- Bounded values through a model built here: Greater -> NonZero -> Gather, the count decided
// by the data, down to none.
onnx::ModelProto nonzero_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(8);
  auto* zero = g->add_initializer();
  zero->set_name("zero");
  zero->set_data_type(onnx::TensorProto::FLOAT);
  zero->add_float_data(0);
  auto* axes = g->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(0);
  auto node = [&](const char* op, std::vector<std::string> ins, const std::string& out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const auto& i : ins) n->add_input(i);
    n->add_output(out);
  };
  node("Greater", {"x", "zero"}, "positive");
  node("NonZero", {"positive"}, "where");
  node("Squeeze", {"where", "axes"}, "index");
  node("Gather", {"x", "index"}, "gathered");
  node("Shape", {"gathered"}, "count");  // a Shape of a bounded value is known only at run time
  node("Cast", {"count"}, "count_f");
  g->mutable_node(5)->add_attribute()->set_name("to");
  g->mutable_node(5)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  g->mutable_node(5)->mutable_attribute(0)->set_i(1);
  node("Concat", {"gathered", "count_f"}, "y");
  g->mutable_node(6)->add_attribute()->set_name("axis");
  g->mutable_node(6)->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  g->mutable_node(6)->mutable_attribute(0)->set_i(0);
  g->add_output()->set_name("y");
  return m;
}

TEST(Detection, BoundedValuesFollowTheirDataDownToNone) {
  const fs::path path = fs::path(::testing::TempDir()) / "cpudl_nonzero.onnx";
  std::ofstream(path, std::ios::binary) << nonzero_model().SerializeAsString();
  cpudl::InferenceSession session(path);
  EXPECT_EQ(session.info({{8}}).ops_planned.at("NonZero"), 1);
  for (const std::vector<float>& x :
       {std::vector<float>{1, -2, 3, -4, 5, -6, 7, -8}, std::vector<float>{-1, -2, -3, -4, -5, -6, -7, -8},
        std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, std::vector<float>{0, 0, 0, 0, 0, 0, 0, 9}}) {
    std::vector<float> expected;
    for (float v : x)
      if (v > 0) expected.push_back(v);
    expected.push_back(static_cast<float>(expected.size()));
    const auto y = session.run({cpudl::Tensor::from_vector(x, {8})});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(y[0].to_vector(), expected);
  }
  fs::remove(path);
}

// ---- ScatterND and GatherND on the ONNX specification's own examples, through one-node models.
cpudl::Tensor one_node(const char* op, const std::vector<std::pair<std::string, cpudl::Tensor>>& inputs,
                       const std::vector<std::pair<std::string, std::int64_t>>& attributes = {}) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("node");
  for (const auto& [name, t] : inputs) {
    auto* init = g->add_initializer();  // the node computes at plan time: constants fold
    init->set_name(name);
    init->set_data_type(t.dtype() == cpudl::DType::i64 ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
    for (std::int64_t d : t.shape()) init->add_dims(d);
    init->set_raw_data(
        t.raw_data(), static_cast<std::size_t>(cpudl::shape_numel(t.shape())) * cpudl::dtype_size(t.dtype()));
    n->add_input(name);
  }
  for (const auto& [name, value] : attributes) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  n->add_output("y");
  g->add_output()->set_name("y");
  const fs::path path = fs::path(::testing::TempDir()) / (std::string("cpudl_") + op + ".onnx");
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  cpudl::InferenceSession session(path);
  auto y = session.run({});
  fs::remove(path);
  return y.at(0);
}

cpudl::Tensor i64(const std::vector<std::int64_t>& v, const cpudl::Shape& shape) {
  return cpudl::Tensor::from_buffer(v.data(), shape, cpudl::DType::i64);
}

TEST(Detection, ScatterAndGatherNdAsTheOnnxSpecificationShows) {
  // ScatterND, example 1: data [1..8], indices [[4], [3], [1], [7]], updates [9, 10, 11, 12]
  auto y = one_node("ScatterND", {{"data", cpudl::Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {8})},
                                  {"indices", i64({4, 3, 1, 7}, {4, 1})},
                                  {"updates", cpudl::Tensor::from_vector({9, 10, 11, 12}, {4})}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 11, 3, 10, 9, 6, 7, 12}));
  // GatherND, batch_dims 0: data [[[0,1],[2,3]],[[4,5],[6,7]]], indices [[0,1],[1,0]] -> [[2,3],[4,5]]
  y = one_node("GatherND", {{"data", cpudl::Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2})},
                            {"indices", i64({0, 1, 1, 0}, {2, 2})}});
  EXPECT_EQ(y.shape(), (cpudl::Shape{2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2, 3, 4, 5}));
  // GatherND, batch_dims 1: indices [[1], [0]] -> [[2,3],[4,5]]
  y = one_node("GatherND",
               {{"data", cpudl::Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2})},
                {"indices", i64({1, 0}, {2, 1})}},
               {{"batch_dims", 1}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2, 3, 4, 5}));
  // ScatterElements with axis 1: data [[1,2,3,4,5]], indices [[1,3]], updates [[1.1,2.1]]
  y = one_node("ScatterElements",
               {{"data", cpudl::Tensor::from_vector({1, 2, 3, 4, 5}, {1, 5})},
                {"indices", i64({1, 3}, {1, 2})},
                {"updates", cpudl::Tensor::from_vector({1.1f, 2.1f}, {1, 2})}},
               {{"axis", 1}});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
  // An index out of range is named, never read past the data.
  try {
    one_node("GatherND",
             {{"data", cpudl::Tensor::from_vector({0, 1, 2, 3}, {2, 2})}, {"indices", i64({2}, {1, 1})}});
    FAIL() << "ran";
  } catch (const cpudl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 2 is out of range [0, 2)"), std::string::npos) << e.what();
  }
}

}  // namespace
