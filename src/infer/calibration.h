// Activation ranges for static quantisation: the float model runs on calibration batches with the
// chosen values exposed as outputs, and an observer turns what they held into a range. Min-max
// takes the extremes; percentile clips each tail at a percentile of a 4096-bin histogram (an
// outlier then costs a clipped value instead of a coarser step for every other value).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cpudl/tensor.h"
#include "infer/graph.h"

namespace cpudl::infer {

enum class Observer { min_max, percentile };

struct ActivationRange {
  float lo = 0, hi = 0;
};

// `graph` as loaded (unoptimised); `values`: names of float values it computes or takes as input;
// `batches`: inputs for its one input. Throws Error naming the batch when a batch does not fit.
// `on_batch`, when given, hears each batch run (done, total over every pass): a progress bar.
using CalibrationProgress = std::function<void(std::size_t done, std::size_t total)>;
std::map<std::string, ActivationRange> calibrate(const Graph& graph, const std::vector<std::string>& values,
                                                 const std::vector<Tensor>& batches, Observer observer,
                                                 double percentile = 99.99,
                                                 const CalibrationProgress& on_batch = {});

}  // namespace cpudl::infer
