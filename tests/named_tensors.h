// The names of a state dict's or a safetensors file's tensors, in order: what the nn and io tests
// compare against PyTorch's names.
#pragma once

#include <string>
#include <vector>

#include "cpudl/nn.h"

namespace cpudl::testing {

inline std::vector<std::string> names(const nn::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : tensors) out.push_back(name);
  return out;
}

}  // namespace cpudl::testing
