// Non-maximum suppression: boxes normalised to ordered corners once per image, candidates filtered
// by score in blocks (most blocks of a detector's 25,200 x 80 scores hold none above the
// threshold, and a block is skipped after one vectorisable test), sorted, then kept greedily.
#include "infer/nms.h"

#include <algorithm>

namespace cpudl::infer {

void nms_prepare_boxes(const float* boxes, std::int64_t count, bool center_point_box, NmsScratch& s) {
  s.corners.resize(static_cast<std::size_t>(count) * 4);
  s.areas.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const float* b = boxes + i * 4;
    float x1, y1, x2, y2;
    if (center_point_box) {
      x1 = b[0] - b[2] / 2;
      x2 = b[0] + b[2] / 2;
      y1 = b[1] - b[3] / 2;
      y2 = b[1] + b[3] / 2;
    } else {  // any diagonal pair of corners, [y1, x1, y2, x2] in ONNX's words: the math is symmetric
      x1 = std::min(b[1], b[3]);
      x2 = std::max(b[1], b[3]);
      y1 = std::min(b[0], b[2]);
      y2 = std::max(b[0], b[2]);
    }
    float* c = s.corners.data() + i * 4;
    c[0] = x1;
    c[1] = y1;
    c[2] = x2;
    c[3] = y2;
    s.areas[static_cast<std::size_t>(i)] = (x2 - x1) * (y2 - y1);
  }
}

namespace {

bool overlaps_too_much(const NmsScratch& s, std::int32_t a, std::int32_t b, float threshold) {
  const float* p = s.corners.data() + static_cast<std::int64_t>(a) * 4;
  const float* q = s.corners.data() + static_cast<std::int64_t>(b) * 4;
  const float w = std::min(p[2], q[2]) - std::max(p[0], q[0]);
  const float h = std::min(p[3], q[3]) - std::max(p[1], q[1]);
  if (w <= 0 || h <= 0) return false;
  const float intersection = w * h;
  const float area_a = s.areas[static_cast<std::size_t>(a)], area_b = s.areas[static_cast<std::size_t>(b)];
  const float union_area = area_a + area_b - intersection;
  if (area_a <= 0 || area_b <= 0 || union_area <= 0) return false;
  return intersection / union_area > threshold;
}

}  // namespace

void nms_one_class(const float* scores, std::int64_t count, const NmsOptions& o, NmsScratch& s,
                   std::vector<std::int32_t>& kept) {
  if (o.max_per_class <= 0 || count == 0) return;
  auto& candidates = s.candidates;
  candidates.clear();
  if (o.score_threshold) {
    const float threshold = *o.score_threshold;
    constexpr std::int64_t kBlock = 16;
    std::int64_t i = 0;
    for (; i + kBlock <= count; i += kBlock) {
      bool any = false;
      for (std::int64_t j = 0; j < kBlock; ++j) any |= scores[i + j] > threshold;
      if (!any) continue;
      for (std::int64_t j = 0; j < kBlock; ++j)
        if (scores[i + j] > threshold) candidates.push_back(static_cast<std::int32_t>(i + j));
    }
    for (; i < count; ++i)
      if (scores[i] > threshold) candidates.push_back(static_cast<std::int32_t>(i));
  } else {
    candidates.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) candidates[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
  }
  std::sort(candidates.begin(), candidates.end(), [scores](std::int32_t a, std::int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  auto& mine = s.kept;
  mine.clear();
  for (const std::int32_t c : candidates) {
    bool keep = true;
    for (const std::int32_t k : mine)
      if (overlaps_too_much(s, k, c, o.iou_threshold)) {
        keep = false;
        break;
      }
    if (!keep) continue;
    mine.push_back(c);
    kept.push_back(c);
    if (static_cast<std::int64_t>(mine.size()) >= o.max_per_class) break;
  }
}

}  // namespace cpudl::infer
