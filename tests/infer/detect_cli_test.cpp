// `cpudl detect` end to end: the raw YOLO fixture post-processed by cpudl must give the detections
// PyTorch's own post-processing (YOLOv5's score filter and torchvision's batched_nms, exported into
// the yolo_tiny_nms fixture) gives on the same picture; boxes map back through the letterbox; the
// drawing is a PNG of the image with the boxes on it; bad inputs get one line and the right code.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_sandbox.h"
#include "cpudl/io.h"
#include "data/image_decode.h"
#include "data/picture.h"

namespace {

using DetectCli = cpudl::testing::CliSandbox;
const std::string kDetect = std::string(CPUDL_FIXTURES_DIR) + "/../onnx/detect/";

struct Expected {
  std::vector<float> boxes, scores;
  std::vector<std::int64_t> labels;
};

// PyTorch's detections on image.png (threshold 0.3, IoU 0.45), boxes clipped to the image as
// YOLOv5's scale_boxes does.
Expected pytorch_detections(float scale) {
  Expected e;
  const cpudl::Tensor b = cpudl::io::load_npy(kDetect + "yolo_tiny_nms_opset17.output0.npy");
  const cpudl::Tensor s = cpudl::io::load_npy(kDetect + "yolo_tiny_nms_opset17.output1.npy");
  const cpudl::Tensor l = cpudl::io::load_npy(kDetect + "yolo_tiny_nms_opset17.output2.npy");
  for (float v : b.to_vector()) e.boxes.push_back(std::clamp(v, 0.0f, 128.0f) * scale);
  e.scores = s.to_vector();
  const auto* labels = static_cast<const std::int64_t*>(l.raw_data());
  e.labels.assign(labels, labels + l.shape()[0]);
  return e;
}

void expect_same_detections(const nlohmann::json& detections, const Expected& e, float box_tolerance) {
  ASSERT_EQ(detections.size(), e.scores.size());
  for (std::size_t i = 0; i < e.scores.size(); ++i) {
    const auto& d = detections[i];
    EXPECT_EQ(d["class"].get<std::int64_t>(), e.labels[i]) << i;
    EXPECT_NEAR(d["score"].get<float>(), e.scores[i], 1e-4f * std::fabs(e.scores[i])) << i;
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(d["box"][k].get<float>(), e.boxes[i * 4 + k], box_tolerance) << i;
  }
}

TEST_F(DetectCli, RawOutputsPostProcessedAsPyTorchDoes) {
  const auto r =
      run("detect " + kDetect + "yolo_tiny_raw_opset17.onnx " + kDetect + "image.png --threshold 0.3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["post_processing"], "cpudl");
  EXPECT_EQ(j["width"], 128);
  EXPECT_EQ(j["detections"][0]["label"], "umbrella");  // COCO's names for 80 classes
  expect_same_detections(j["detections"], pytorch_detections(1.0f), 2e-3f);
}

TEST_F(DetectCli, ModelWithNmsInsideAndBoxesMappedBackThroughTheLetterbox) {
  // The picture at twice its size (each pixel a 2x2 block): the letterbox halves it back exactly
  // (bilinear between equal neighbours), so the detections are PyTorch's at twice the scale.
  const cpudl::data::DecodedImage small =
      cpudl::data::decode_image_values(cpudl::io::read_file(kDetect + "image.png"), "image.png");
  cpudl::data::DecodedImage big{3, 256, 256, std::vector<float>(3 * 256 * 256)};
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 256; ++y)
      for (int x = 0; x < 256; ++x)
        big.values[static_cast<std::size_t>((c * 256 + y) * 256 + x)] =
            small.values[static_cast<std::size_t>((c * 128 + y / 2) * 128 + x / 2)];
  cpudl::io::write_file_atomically(path("big.png"), cpudl::data::Picture::from_image(big).png());
  const auto r = run("detect " + kDetect + "yolo_tiny_nms_opset17.onnx " + path("big.png") + " --out " +
                     path("boxes.json") + " --draw " + path("drawn.png"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("121 object(s) in 256x256"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("inside the model"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(cpudl::testing::slurp(path("boxes.json")));
  EXPECT_EQ(j["post_processing"], "model");
  expect_same_detections(j["detections"], pytorch_detections(2.0f), 4e-3f);
  // The drawing: the image, same size, with the boxes' outlines on it.
  const auto drawn = cpudl::data::decode_image_values(cpudl::io::read_file(path("drawn.png")), "drawn.png");
  ASSERT_EQ(drawn.width, 256);
  ASSERT_EQ(drawn.height, 256);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < drawn.values.size(); ++i)
    changed += std::fabs(drawn.values[i] - big.values[i]) > 0.01f;
  EXPECT_GT(changed, 256u * 3) << "no box drawn";
  EXPECT_LT(changed, drawn.values.size()) << "the image is gone";
}

TEST_F(DetectCli, BadInputsAreNamed) {
  std::ofstream(path("photo.jpg")) << "not a picture";
  auto r = run("detect " + kDetect + "yolo_tiny_raw_opset17.onnx " + path("photo.jpg"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("photo.jpg"), std::string::npos) << r.err;
  r = run("detect " + std::string(CPUDL_FIXTURES_DIR) + "/../onnx/lenet5_opset13.onnx " + kDetect +
          "image.png");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a detector's outputs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("found 'output' f32"), std::string::npos) << r.err;
  r = run("detect " + kDetect + "yolo_tiny_raw_opset17.onnx " + kDetect + "image.png --threshold 2");
  EXPECT_EQ(r.exit_code, 2);
  r = run("detect " + kDetect + "yolo_tiny_raw_opset17.onnx " + kDetect + "image.png --out " + kDetect +
          "image.png");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
  r = run("detect " + kDetect + "yolo_tiny_raw_opset17.onnx " + kDetect + "image.png --labels " +
          path("none.txt"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("none.txt"), std::string::npos) << r.err;
}

TEST_F(DetectCli, InfoSaysWherePostProcessingRuns) {
  auto r = run("info " + kDetect + "yolo_tiny_nms_opset17.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("detector: post-processed outputs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NonMaxSuppression 1"), std::string::npos) << r.out;  // inside the If's branch
  r = run("info " + kDetect + "yolo_tiny_raw_opset17.onnx --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(nlohmann::json::parse(r.out)["detector"].get<std::string>().find("run in cpudl"),
            std::string::npos);
  r = run("info " + std::string(CPUDL_FIXTURES_DIR) + "/../onnx/lenet5_opset13.onnx --json");
  EXPECT_EQ(nlohmann::json::parse(r.out)["detector"], "");
}

TEST(Picture, PngRoundTripsThroughTheDecoder) {
  cpudl::data::Picture p;
  p.width = 7, p.height = 5;
  for (int i = 0; i < 7 * 5 * 3; ++i) p.rgb.push_back(static_cast<std::uint8_t>(i * 37 % 256));
  const std::uint8_t red[3] = {255, 0, 0};
  p.outline(1, 1, 5, 3, 1, red);
  const auto d = cpudl::data::decode_image_values(p.png(), "p.png");
  ASSERT_EQ(d.channels, 3);
  ASSERT_EQ(d.width, 7);
  ASSERT_EQ(d.height, 5);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(std::lround(d.values[static_cast<std::size_t>((c * 5 + y) * 7 + x)] * 255),
                  p.rgb[static_cast<std::size_t>((y * 7 + x) * 3 + c)]);
  EXPECT_EQ(p.rgb[(1 * 7 + 1) * 3], 255);                                   // the outline's corner
  EXPECT_EQ(p.rgb[(2 * 7 + 2) * 3 + 1], ((2 * 7 + 2) * 3 + 1) * 37 % 256);  // inside it: untouched
}

}  // namespace
