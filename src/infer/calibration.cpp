// Calibration (calibration.h): two passes over the batches when a histogram is needed, the first
// for each value's extremes (which fix the bins), the second to fill the bins.
#include "infer/calibration.h"

#include <algorithm>
#include <cmath>

#include "cpudl/error.h"
#include "infer/optimizer.h"
#include "infer/plan.h"

namespace cpudl::infer {
namespace {

constexpr int kBins = 4096;

// Runs `g` (whose outputs are the calibrated values) on each batch, handing each output to `visit`.
template <class Visit>
void for_each_output(const Graph& g, const std::vector<Tensor>& batches, Visit visit,
                     const std::function<void()>& after_batch) {
  std::map<Shape, std::unique_ptr<Plan>> plans;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const Tensor x = batches[b].is_contiguous() ? batches[b] : batches[b].contiguous();
    auto& plan = plans[x.shape()];
    if (!plan) {
      OptimizerReport report;
      try {
        plan = std::make_unique<Plan>(g, std::vector<Shape>{x.shape()}, report);
      } catch (const Error& e) {
        throw Error("calibration batch " + std::to_string(b + 1) + ": " + e.what());
      }
    }
    std::vector<std::vector<float>> buffers;
    std::vector<TensorView> outs;
    for (const auto& d : plan->output_descs()) buffers.emplace_back(static_cast<std::size_t>(d.numel()));
    for (std::size_t o = 0; o < buffers.size(); ++o)
      outs.push_back(TensorView{DType::f32, &plan->output_descs()[o].shape, buffers[o].data()});
    const TensorView in{x.dtype(), &x.shape(), x.raw_data()};
    plan->run(std::span(&in, 1), outs);
    for (std::size_t o = 0; o < buffers.size(); ++o) visit(o, buffers[o]);
    after_batch();
  }
}

}  // namespace

std::map<std::string, ActivationRange> calibrate(const Graph& graph, const std::vector<std::string>& values,
                                                 const std::vector<Tensor>& batches, Observer observer,
                                                 double percentile, const CalibrationProgress& on_batch) {
  if (batches.empty()) throw Error("calibration needs at least one batch");
  if (graph.inputs.size() != 1) throw Error("calibration needs a model with one input");
  Graph g = graph;
  g.outputs.clear();
  for (const auto& v : values) g.outputs.push_back(ValueInfo{v, DType::f32, {}});
  // Optimising is safe: values that are graph outputs are never fused away (optimizer.cpp).
  OptimizerReport report;
  optimize_graph(g, report);

  const std::size_t total = batches.size() * (observer == Observer::percentile ? 2 : 1);
  std::size_t done = 0;
  const std::function<void()> after_batch = [&] {
    if (on_batch) on_batch(++done, total);
  };
  std::vector<ActivationRange> ranges(values.size());
  std::vector<bool> seen(values.size(), false);
  for_each_output(
      g, batches,
      [&](std::size_t o, const std::vector<float>& data) {
        for (float v : data) {  // infinities and NaN (a diverged model) say nothing about the range
          if (!std::isfinite(v)) continue;
          if (!seen[o]) ranges[o] = {v, v};
          ranges[o].lo = std::min(ranges[o].lo, v);
          ranges[o].hi = std::max(ranges[o].hi, v);
          seen[o] = true;
        }
      },
      after_batch);
  if (observer == Observer::percentile) {
    std::vector<std::vector<double>> histograms(values.size(), std::vector<double>(kBins, 0.0));
    for_each_output(
        g, batches,
        [&](std::size_t o, const std::vector<float>& data) {
          const double lo = ranges[o].lo, width = (static_cast<double>(ranges[o].hi) - lo) / kBins;
          if (!(width > 0)) return;
          for (float v : data) {
            if (!std::isfinite(v)) continue;
            const auto bin =
                static_cast<std::size_t>(std::clamp((static_cast<double>(v) - lo) / width, 0.0, kBins - 1.0));
            histograms[o][bin] += 1;
          }
        },
        after_batch);
    for (std::size_t o = 0; o < values.size(); ++o) {
      const auto& h = histograms[o];
      double total = 0;
      for (double c : h) total += c;
      if (total == 0) continue;
      const double width = (static_cast<double>(ranges[o].hi) - ranges[o].lo) / kBins,
                   tail = total * (100.0 - percentile) / 100.0;
      std::size_t first = 0, last = kBins - 1;
      for (double below = 0; first < kBins - 1 && below + h[first] <= tail; ++first) below += h[first];
      for (double above = 0; last > first && above + h[last] <= tail; --last) above += h[last];
      const float lo = static_cast<float>(ranges[o].lo + width * static_cast<double>(first));
      const float hi = static_cast<float>(ranges[o].lo + width * static_cast<double>(last + 1));
      ranges[o] = {std::max(ranges[o].lo, lo), std::min(ranges[o].hi, hi)};
    }
  }
  std::map<std::string, ActivationRange> out;
  for (std::size_t o = 0; o < values.size(); ++o) out[values[o]] = ranges[o];
  return out;
}

}  // namespace cpudl::infer
