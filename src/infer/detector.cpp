// Detector outputs (detector.h): recognising them, and YOLOv5's post-processing of raw rows.
#include "infer/detector.h"

#include <algorithm>
#include <map>

#include "cpudl/error.h"
#include "infer/nms.h"

namespace cpudl::infer {

DetectorOutputs detector_outputs(const std::vector<ModelValue>& outputs, const std::string& model) {
  DetectorOutputs d;
  auto found = [&] {
    std::string list;
    for (const auto& o : outputs)
      list += (list.empty() ? "" : ", ") + ("'" + o.name + "' ") + std::string(dtype_name(o.dtype)) + " " +
              shape_text(o.shape);
    return list.empty() ? std::string("none") : list;
  };
  if (outputs.size() == 1 && outputs[0].dtype == DType::f32 && outputs[0].shape.size() == 3 &&
      outputs[0].shape[2] > 5) {
    d.kind = DetectorOutputs::Kind::yolo_raw;
    d.classes = outputs[0].shape[2] - 5;
    d.summary = "YOLO-style raw output '" + outputs[0].name + "' " + shape_text(outputs[0].shape) + " (" +
                std::to_string(d.classes) +
                " classes): the score filter and NMS run in cpudl, not in the model";
    return d;
  }
  int boxes = -1, scores = -1, labels = -1;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const ModelValue& o = outputs[i];
    if (o.dtype == DType::f32 && o.shape.size() == 2 && o.shape[1] == 4 && boxes < 0)
      boxes = static_cast<int>(i);
    else if (o.dtype == DType::f32 && o.shape.size() == 1 && scores < 0)
      scores = static_cast<int>(i);
    else if ((o.dtype == DType::i64 || o.dtype == DType::i32) && o.shape.size() == 1 && labels < 0)
      labels = static_cast<int>(i);
  }
  if (outputs.size() == 3 && boxes >= 0 && scores >= 0 && labels >= 0) {
    d.kind = DetectorOutputs::Kind::post_processed;
    d.boxes = static_cast<std::size_t>(boxes), d.scores = static_cast<std::size_t>(scores),
    d.labels = static_cast<std::size_t>(labels);
    d.summary = "post-processed outputs: boxes '" + outputs[d.boxes].name + "', scores '" +
                outputs[d.scores].name + "', labels '" + outputs[d.labels].name +
                "' (score filter and NMS inside the model)";
    return d;
  }
  throw Error(model +
              ": not a detector's outputs: expected one [batch, boxes, 5 + classes] tensor (YOLOv5 "
              "without post-processing) or boxes [n, 4], scores [n] and labels [n] (int64); found " +
              found());
}

std::vector<Detection> yolo_detections(const float* rows, std::int64_t count, std::int64_t classes,
                                       float threshold, float iou, std::int64_t max_det) {
  const std::int64_t width = 5 + classes;
  // Candidates by class: the row's corners and its score, rows in order.
  std::map<std::int64_t, std::vector<std::int64_t>> by_class;
  std::vector<float> score(static_cast<std::size_t>(count));
  for (std::int64_t r = 0; r < count; ++r) {
    const float* p = rows + r * width;
    if (!(p[4] > threshold)) continue;  // objectness bounds the score: most rows stop here
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < classes; ++c)
      if (p[5 + c] > p[5 + best]) best = c;
    const float s = p[5 + best] * p[4];
    if (!(s > threshold)) continue;
    score[static_cast<std::size_t>(r)] = s;
    by_class[best].push_back(r);
  }
  std::vector<std::pair<Detection, std::int64_t>> kept;  // with its row, for the order of equal scores
  NmsScratch scratch;
  std::vector<float> boxes, scores;
  std::vector<std::int32_t> chosen;
  NmsOptions options;
  options.iou_threshold = iou;
  options.max_per_class = std::max<std::int64_t>(max_det, 0);
  for (const auto& [label, members] : by_class) {
    boxes.clear();
    scores.clear();
    for (const std::int64_t r : members) {
      const float* p = rows + r * width;
      boxes.insert(boxes.end(), {p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2});
      scores.push_back(score[static_cast<std::size_t>(r)]);
    }
    nms_prepare_boxes(boxes.data(), static_cast<std::int64_t>(members.size()), false, scratch);
    chosen.clear();
    nms_one_class(scores.data(), static_cast<std::int64_t>(members.size()), options, scratch, chosen);
    for (const std::int32_t k : chosen) {
      const float* b = &boxes[static_cast<std::size_t>(k) * 4];
      Detection det;
      det.label = label;
      det.score = scores[static_cast<std::size_t>(k)];
      det.box[0] = b[1], det.box[1] = b[0], det.box[2] = b[3], det.box[3] = b[2];
      kept.emplace_back(det, members[static_cast<std::size_t>(k)]);
    }
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.first.score > b.first.score || (a.first.score == b.first.score && a.second < b.second);
  });
  std::vector<Detection> out;
  for (std::size_t i = 0; i < kept.size() && static_cast<std::int64_t>(i) < max_det; ++i)
    out.push_back(kept[i].first);
  return out;
}

std::vector<Detection> post_processed_detections(const std::vector<Tensor>& outputs, const DetectorOutputs& d,
                                                 float threshold) {
  const Tensor boxes = outputs.at(d.boxes).contiguous(), scores = outputs.at(d.scores).contiguous(),
               labels = outputs.at(d.labels).contiguous();
  const std::int64_t n = scores.shape().at(0);
  if (boxes.shape() != Shape{n, 4} || labels.shape() != Shape{n})
    throw Error("detector outputs disagree: boxes " + shape_text(boxes.shape()) + ", scores " +
                shape_text(scores.shape()) + ", labels " + shape_text(labels.shape()));
  std::vector<Detection> out;
  for (std::int64_t i = 0; i < n; ++i) {
    Detection det;
    det.score = static_cast<const float*>(scores.raw_data())[i];
    if (!(det.score >= threshold)) continue;
    det.label = labels.dtype() == DType::i64 ? static_cast<const std::int64_t*>(labels.raw_data())[i]
                                             : static_cast<const std::int32_t*>(labels.raw_data())[i];
    for (int k = 0; k < 4; ++k) det.box[k] = static_cast<const float*>(boxes.raw_data())[i * 4 + k];
    out.push_back(det);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Detection& a, const Detection& b) { return a.score > b.score; });
  return out;
}

}  // namespace cpudl::infer
