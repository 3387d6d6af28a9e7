// The names of a state dict's or a safetensors file's tensors, in order: what the nn and io tests
// compare against PyTorch's names; and how far two model files' weights lie apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpudl/io.h"
#include "cpudl/nn.h"

namespace cpudl::testing {

inline std::vector<std::string> names(const nn::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : tensors) out.push_back(name);
  return out;
}

// ||a - b|| / ||a|| tensor by tensor over two safetensors files (same names in the same order), the
// worst of them. (Element-wise, Adam magnifies the sign of gradients that round to about zero:
// one process on 1 and on 2 threads differs by 3e-4 of the largest weight in a few elements after
// 20 steps, and by 2.4e-6 in this norm.)
inline double worst_relative_difference(const std::string& a_path, const std::string& b_path) {
  const auto a = io::load_safetensors(a_path), b = io::load_safetensors(b_path);
  if (names(a.tensors) != names(b.tensors)) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto x = a.tensors[i].second.to_vector(), y = b.tensors[i].second.to_vector();
    double diff = 0, norm = 1e-30;
    for (std::size_t j = 0; j < x.size(); ++j) {
      diff += (static_cast<double>(x[j]) - y[j]) * (static_cast<double>(x[j]) - y[j]);
      norm += static_cast<double>(x[j]) * x[j];
    }
    worst = std::max(worst, std::sqrt(diff / norm));
  }
  return worst;
}

}  // namespace cpudl::testing
