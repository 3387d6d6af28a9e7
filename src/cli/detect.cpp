// `cpudl detect`: an object detector on one image. The image is letterboxed to the model's input
// as YOLOv5 does (or stretched to a torchvision detector's fixed size), the model run, its detections taken
// from whichever layout its outputs have (infer/detector.h: raw YOLO rows, post-processed here, or
// boxes/scores/labels from a model with its NMS inside), mapped back to the image's pixels, printed, and
// optionally written as JSON and drawn onto a copy of the image.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/usage_errors.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "data/image_decode.h"
#include "data/picture.h"
#include "infer/detector.h"

namespace cpudl::cli {
namespace {

// The 80 COCO classes in the order YOLOv5 and torchvision's detection heads number them, for a
// model with 80 classes and no --labels.
const char* const kCocoNames[80] = {"person",        "bicycle",      "car",
                                    "motorcycle",    "airplane",     "bus",
                                    "train",         "truck",        "boat",
                                    "traffic light", "fire hydrant", "stop sign",
                                    "parking meter", "bench",        "bird",
                                    "cat",           "dog",          "horse",
                                    "sheep",         "cow",          "elephant",
                                    "bear",          "zebra",        "giraffe",
                                    "backpack",      "umbrella",     "handbag",
                                    "tie",           "suitcase",     "frisbee",
                                    "skis",          "snowboard",    "sports ball",
                                    "kite",          "baseball bat", "baseball glove",
                                    "skateboard",    "surfboard",    "tennis racket",
                                    "bottle",        "wine glass",   "cup",
                                    "fork",          "knife",        "spoon",
                                    "bowl",          "banana",       "apple",
                                    "sandwich",      "orange",       "broccoli",
                                    "carrot",        "hot dog",      "pizza",
                                    "donut",         "cake",         "chair",
                                    "couch",         "potted plant", "bed",
                                    "dining table",  "toilet",       "tv",
                                    "laptop",        "mouse",        "remote",
                                    "keyboard",      "cell phone",   "microwave",
                                    "oven",          "toaster",      "sink",
                                    "refrigerator",  "book",         "clock",
                                    "vase",          "scissors",     "teddy bear",
                                    "hair drier",    "toothbrush"};

struct DetectOptions {
  std::string model, image, labels, out, draw;
  float threshold = 0.25f, iou = 0.45f;
  int max_det = 300, threads = 0;
  std::int64_t max_loop_iterations = InferenceOptions{}.max_loop_iterations;
  bool json = false;
};

std::vector<std::string> read_labels(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--labels " + path + ": cannot open it");
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    names.push_back(line);
  }
  if (names.empty()) throw UsageError("--labels " + path + ": no names in it (one per line)");
  return names;
}

// Distinct, saturated colours per class (golden-ratio hues).
void class_color(std::int64_t label, std::uint8_t out[3]) {
  const double h = std::fmod(static_cast<double>(label) * 0.618033988749895, 1.0) * 6.0;
  const double f = h - std::floor(h);
  const double v = 0.95, s = 0.85, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  double r = v, g = t, b = p;
  switch (static_cast<int>(h)) {
    case 1:
      r = q, g = v, b = p;
      break;
    case 2:
      r = p, g = v, b = t;
      break;
    case 3:
      r = p, g = q, b = v;
      break;
    case 4:
      r = t, g = p, b = v;
      break;
    case 5:
      r = v, g = p, b = q;
      break;
    default:
      break;
  }
  out[0] = static_cast<std::uint8_t>(r * 255), out[1] = static_cast<std::uint8_t>(g * 255),
  out[2] = static_cast<std::uint8_t>(b * 255);
}

void draw(const data::DecodedImage& image, const std::vector<infer::Detection>& detections,
          const std::vector<std::string>& names, const std::string& path) {
  data::Picture picture = data::Picture::from_image(image);
  const std::int64_t shorter = std::min(picture.width, picture.height);
  const int thickness = static_cast<int>(std::max<std::int64_t>(1, shorter / 250));
  const int scale = shorter >= 480 ? 2 : 1;
  // Worst first, so that the best boxes and their labels end on top.
  for (auto it = detections.rbegin(); it != detections.rend(); ++it) {
    const infer::Detection& d = *it;
    std::uint8_t color[3];
    class_color(d.label, color);
    const auto x1 = static_cast<std::int64_t>(std::floor(d.box[0])),
               y1 = static_cast<std::int64_t>(std::floor(d.box[1]));
    const auto x2 = static_cast<std::int64_t>(std::ceil(d.box[2])),
               y2 = static_cast<std::int64_t>(std::ceil(d.box[3]));
    picture.outline(x1, y1, x2, y2, thickness, color);
    char score[16];
    std::snprintf(score, sizeof score, " %.2f", static_cast<double>(d.score));
    const std::string text = names[static_cast<std::size_t>(d.label)] + score;
    const std::int64_t h = data::text_height(scale) + 2 * scale,
                       w = data::text_width(text, scale) + 2 * scale;
    const std::int64_t top = y1 - h >= 0 ? y1 - h : y1;  // above the box, or inside it at the top
    picture.fill_rect(x1, top, x1 + w - 1, top + h - 1, color);
    const bool light = color[0] * 299 + color[1] * 587 + color[2] * 114 > 150000;
    const std::uint8_t ink[3] = {static_cast<std::uint8_t>(light ? 0 : 255),
                                 static_cast<std::uint8_t>(light ? 0 : 255),
                                 static_cast<std::uint8_t>(light ? 0 : 255)};
    picture.text(x1 + 2 * scale, top + 2 * scale, text, scale, ink);
  }
  io::write_file_atomically(path, picture.png());
}

int run_detect(const DetectOptions& o) {
  for (const std::string* out : {&o.out, &o.draw})
    if (!out->empty())
      io::require_output_is_not_an_input(*out, {o.model, o.image}, out == &o.out ? "--out" : "--draw");
  use_threads(o.threads);
  const data::DecodedImage image = data::decode_image_values(io::read_file(o.image), o.image);
  InferenceOptions options;
  options.max_loop_iterations = o.max_loop_iterations;
  InferenceSession session(o.model, options);
  const infer::DetectorOutputs layout = infer::detector_outputs(session.outputs(), o.model);
  if (session.inputs().size() != 1)
    throw Error(o.model + ": a detector takes one image input, this model takes " +
                std::to_string(session.inputs().size()));
  const ModelValue& input = session.inputs()[0];
  // [batch, 3, H, W] (YOLOv5: letterboxed) or [3, H, W] (torchvision's detectors, which take a list
  // of images and resize and normalise inside: stretched to the export's size).
  const bool single = input.shape.size() == 3;
  const std::size_t c = single ? 0 : 1;
  if (input.dtype != DType::f32 || (input.shape.size() != 4 && !single) ||
      (input.shape[c] != 3 && input.shape[c] != -1))
    throw Error(o.model + ": input '" + input.name + "' is " + std::string(dtype_name(input.dtype)) + " " +
                shape_text(input.shape) + ", expected float [batch, 3, height, width] or [3, height, width]");
  // A free height or width (a dynamic export) gets YOLOv5's default 640.
  const std::int64_t height = input.shape[c + 1] > 0 ? input.shape[c + 1] : 640,
                     width = input.shape[c + 2] > 0 ? input.shape[c + 2] : 640;
  const data::Letterbox box = data::letterbox(image, width, height, single);
  const Shape shape = single ? Shape{3, height, width} : Shape{1, 3, height, width};
  const Tensor x = Tensor::from_vector(box.values, shape);

  const auto start = std::chrono::steady_clock::now();
  const std::vector<Tensor> outputs = session.run({x});
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::vector<infer::Detection> detections;
  if (layout.kind == infer::DetectorOutputs::Kind::yolo_raw) {
    const Tensor rows = outputs[0].contiguous();
    detections = infer::yolo_detections(static_cast<const float*>(rows.raw_data()), rows.shape()[1],
                                        layout.classes, o.threshold, o.iou, o.max_det);
  } else {
    detections = infer::post_processed_detections(outputs, layout, o.threshold);
    if (detections.size() > static_cast<std::size_t>(o.max_det))
      detections.resize(static_cast<std::size_t>(o.max_det));
  }

  std::vector<std::string> names;
  if (!o.labels.empty()) names = read_labels(o.labels);
  if (names.empty() && layout.classes == 80) names.assign(std::begin(kCocoNames), std::end(kCocoNames));
  for (auto& d : detections) {  // back to the image's pixels
    for (int k = 0; k < 4; ++k) {
      const float pad = k % 2 == 0 ? box.pad_x : box.pad_y, gain = k % 2 == 0 ? box.gain_x : box.gain_y;
      const auto limit = static_cast<float>(k % 2 == 0 ? image.width : image.height);
      d.box[k] = std::clamp((d.box[k] - pad) / gain, 0.0f, limit);
    }
    if (d.label < 0) throw Error(o.model + ": negative class " + std::to_string(d.label) + " in its output");
    while (static_cast<std::size_t>(d.label) >= names.size())
      names.push_back("class " + std::to_string(names.size()));
  }

  nlohmann::json result;
  result["model"] = o.model;
  result["image"] = o.image;
  result["width"] = image.width;
  result["height"] = image.height;
  result["post_processing"] = layout.kind == infer::DetectorOutputs::Kind::yolo_raw ? "cpudl" : "model";
  result["milliseconds"] = ms;
  result["detections"] = nlohmann::json::array();
  for (const auto& d : detections)
    result["detections"].push_back({{"label", names[static_cast<std::size_t>(d.label)]},
                                    {"class", d.label},
                                    {"score", d.score},
                                    {"box", {d.box[0], d.box[1], d.box[2], d.box[3]}}});
  if (!o.out.empty()) io::write_file_atomically(o.out, result.dump(2) + "\n");
  if (!o.draw.empty()) draw(image, detections, names, o.draw);
  if (o.json) {
    std::printf("%s\n", result.dump().c_str());
    return 0;
  }
  std::printf("%s: %zu object(s) in %lldx%lld, model %.1f ms; %s\n", o.image.c_str(), detections.size(),
              static_cast<long long>(image.width), static_cast<long long>(image.height), ms,
              layout.summary.c_str());
  for (const auto& d : detections)
    std::printf("  %-16s %.3f  [%.1f, %.1f, %.1f, %.1f]\n", names[static_cast<std::size_t>(d.label)].c_str(),
                static_cast<double>(d.score), static_cast<double>(d.box[0]), static_cast<double>(d.box[1]),
                static_cast<double>(d.box[2]), static_cast<double>(d.box[3]));
  if (!o.draw.empty()) std::printf("drew the boxes into %s\n", o.draw.c_str());
  return 0;
}

}  // namespace

void add_detect_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<DetectOptions>();
  CLI::App* c = app.add_subcommand(
      "detect",
      "Objects in an image: boxes, labels and scores from an ONNX detector (YOLOv5-style, with or without "
      "its NMS in the graph), printed, written as JSON, drawn");
  c->add_option("model", o->model, "Detector (.onnx)")->required();
  c->add_option("image", o->image, "Image (PNG or PGM), letterboxed to the model's input")->required();
  c->add_option("--threshold", o->threshold, "Lowest score kept (default 0.25)")->check(in_range(0.0f, 1.0f));
  c->add_option("--iou", o->iou,
                "Overlap (intersection over union) above which NMS drops the lower-scoring box of a class "
                "(default 0.45; a model with NMS inside keeps its own)")
      ->check(in_range(0.0f, 1.0f));
  c->add_option("--max-det", o->max_det, "At most this many detections (default 300)")
      ->check(in_range(1, 100000));
  c->add_option("--labels", o->labels,
                "Class names, one per line in class order (default: COCO's 80 for a model with 80 classes, "
                "else 'class N')");
  c->add_option("--out", o->out, "Write the detections as JSON to this file");
  c->add_option("--draw", o->draw, "Write the image with the boxes and labels drawn on it to this PNG file");
  add_threads_option(c, o->threads);
  add_max_loop_iterations_option(c, o->max_loop_iterations);
  c->add_flag("--json", o->json, "Print the detections as one JSON object");
  c->callback([&action, o] { action = [o] { return run_detect(*o); }; });
}

}  // namespace cpudl::cli
