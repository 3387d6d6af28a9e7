// Non-maximum suppression, once: the NonMaxSuppression operator's kernel (ops/detection.cpp) and
// `cpudl detect`, which runs it on raw YOLO outputs, both call it.
//
// Semantics follow ONNX (and ONNX Runtime): per class, candidates whose score is above the score
// threshold (strictly) are visited by decreasing score, equal scores by increasing box index (as
// ONNX's reference evaluator; ONNX Runtime's heap leaves their order unspecified); a candidate is
// kept unless its intersection over union with a box already kept exceeds the IoU threshold
// (strictly; boxes of zero area overlap nothing), until the class has its maximum.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace cpudl::infer {

struct NmsOptions {
  bool center_point_box = false;   // boxes as [x_center, y_center, width, height]; else two corners
  std::int64_t max_per_class = 0;  // 0 keeps nothing (ONNX's default)
  float iou_threshold = 0;
  std::optional<float> score_threshold;  // none: every box is a candidate
};

// Reused buffers, so that a detector's steady run does not allocate.
struct NmsScratch {
  std::vector<float> corners, areas;      // per box: x1, y1, x2, y2 (ordered), and its area
  std::vector<std::uint64_t> candidates;  // sort keys: score (descending), then box index
  std::vector<std::int32_t> above;        // the positions above the score threshold
  // The boxes kept so far in this class, one array per coordinate, so that one candidate is tested
  // against all of them in a loop the compiler vectorises.
  std::vector<float> kept_x1, kept_y1, kept_x2, kept_y2, kept_area;
};

// Boxes of one image, `count` x 4; prepares them for any number of classes.
void nms_prepare_boxes(const float* boxes, std::int64_t count, bool center_point_box, NmsScratch& scratch);
// One class: `scores` has `count` entries (the boxes given to nms_prepare_boxes). Appends the kept
// box indices, best first, to `kept`.
void nms_one_class(const float* scores, std::int64_t count, const NmsOptions& options, NmsScratch& scratch,
                   std::vector<std::int32_t>& kept);

}  // namespace cpudl::infer
