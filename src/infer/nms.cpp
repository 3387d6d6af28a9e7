// Non-maximum suppression: boxes normalised to ordered corners once per image, candidates filtered
// by score in blocks (most blocks of a detector's 25,200 x 80 scores hold none above the
// threshold, and a block is skipped after one vectorisable count), sorted, then kept greedily,
// each candidate tested against the kept boxes by a SIMD kernel (kernels' box_overlaps_any).
#include "infer/nms.h"

#include <algorithm>
#include <cstring>

#include "kernels/dispatch.h"

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

void nms_one_class(const float* scores, std::int64_t count, const NmsOptions& o, NmsScratch& s,
                   std::vector<std::int32_t>& kept) {
  if (o.max_per_class <= 0 || count == 0) return;
  // Candidates as 64-bit keys that sort best first: the score's bits made order-preserving and
  // inverted above, the box index below (equal scores: the lower index first). One integer sort,
  // no indirect loads in the comparisons.
  auto key = [scores](std::int64_t i) {
    std::uint32_t bits;
    std::memcpy(&bits, &scores[i], sizeof bits);
    bits = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;  // float order as unsigned order
    return (static_cast<std::uint64_t>(~bits) << 32) | static_cast<std::uint32_t>(i);
  };
  auto& candidates = s.candidates;
  candidates.clear();
  if (o.score_threshold) {
    auto& above = s.above;
    if (above.size() < static_cast<std::size_t>(count)) above.resize(static_cast<std::size_t>(count));
    const std::size_t n = kernels::kernel_table().f32_indices_above.fn(
        scores, static_cast<std::size_t>(count), *o.score_threshold, above.data());
    for (std::size_t i = 0; i < n; ++i) candidates.push_back(key(above[i]));
  } else {
    candidates.resize(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) candidates[static_cast<std::size_t>(i)] = key(i);
  }
  std::sort(candidates.begin(), candidates.end());
  const auto most = static_cast<std::size_t>(std::min<std::int64_t>(o.max_per_class, count));
  for (auto* v : {&s.kept_x1, &s.kept_y1, &s.kept_x2, &s.kept_y2, &s.kept_area})
    if (v->size() < std::min(most, candidates.size())) v->resize(std::min(most, candidates.size()));
  std::size_t n = 0;
  const kernels::BoxOverlapsAnyFn overlaps = kernels::kernel_table().box_overlaps_any.fn;
  const kernels::BoxColumns kept_boxes{s.kept_x1.data(), s.kept_y1.data(), s.kept_x2.data(), s.kept_y2.data(),
                                       s.kept_area.data()};
  for (const std::uint64_t k : candidates) {
    const auto c = static_cast<std::int32_t>(k & 0xFFFFFFFFu);
    const float* q = s.corners.data() + static_cast<std::int64_t>(c) * 4;
    const float query[5] = {q[0], q[1], q[2], q[3], s.areas[static_cast<std::size_t>(c)]};
    // A box of no area overlaps nothing (and is kept); else it goes if it overlaps a kept box.
    if (query[4] > 0 && overlaps(kept_boxes, n, query, o.iou_threshold)) continue;
    s.kept_x1[n] = q[0], s.kept_y1[n] = q[1], s.kept_x2[n] = q[2], s.kept_y2[n] = q[3];
    s.kept_area[n] = s.areas[static_cast<std::size_t>(c)];
    ++n;
    kept.push_back(c);
    if (n >= most) break;
  }
}

}  // namespace cpudl::infer
