// Object detectors' outputs, once for `cpudl detect`, `cpudl info` and the tests: which outputs of
// a model are its detections, and the post-processing YOLOv5 applies to raw ones (score filter,
// per-class NMS through nms.h), so that a model exported without its post-processing detects too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpudl/inference.h"

namespace cpudl::infer {

struct Detection {
  std::int64_t label = 0;
  float score = 0;
  float box[4] = {0, 0, 0, 0};  // x1, y1, x2, y2 in the model input's pixels
};

struct DetectorOutputs {
  enum class Kind {
    yolo_raw,       // one [batch, candidates, 5 + classes] output: cx, cy, w, h, objectness, class scores
    post_processed  // boxes [n, 4] (corners), scores [n] and labels [n] (int64), NMS inside the model
  } kind = Kind::yolo_raw;
  std::size_t boxes = 0, scores = 0, labels = 0;  // output indices (yolo_raw: `boxes` is the output)
  std::int64_t classes = 0;                       // yolo_raw: from the output's last dimension
  std::string summary;                            // one line for `cpudl info` and `cpudl detect`
};

// Recognises the model's detection outputs from their types and shapes; throws Error naming the
// model and every output found when they are neither layout.
DetectorOutputs detector_outputs(const std::vector<ModelValue>& outputs, const std::string& model);

// YOLOv5's post-processing of one image's raw rows (`count` x (5 + classes)): score = objectness x
// the best class's probability, kept above `threshold`, NMS per class at `iou`, at most `max_det`
// detections, best first (equal scores: the earlier row first).
std::vector<Detection> yolo_detections(const float* rows, std::int64_t count, std::int64_t classes,
                                       float threshold, float iou, std::int64_t max_det);

// The detections of a post-processed model's outputs (run() results), those scoring at least
// `threshold`, best first.
std::vector<Detection> post_processed_detections(const std::vector<Tensor>& outputs, const DetectorOutputs& d,
                                                 float threshold);

}  // namespace cpudl::infer
