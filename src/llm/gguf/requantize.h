// A GGUF model's weight matrices re-encoded in another type (`cpudl quantize IN.gguf OUT.gguf
// --type T`): every metadata key copied (general.file_type set to the target's), vectors such as
// norms and biases kept as they are, each matrix dequantised row by row and quantised again.
// Targets are llama.cpp's names, including its Q4_K_M mix.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "llm/gguf/ggml_types.h"

namespace cpudl::llm {

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q4_k_m", "q6_k", as the --type option lists them.
std::string_view requantize_type_names();
bool is_requantize_type(std::string_view name);

// Q4_K_M, the mix most GGUF downloads use, as llama.cpp's quantize makes it: the type of a
// matrix named `name` in a model of `layers` blocks.
GgmlType q4_k_m_type(std::string_view name, std::int64_t layers);

struct RequantizeSummary {
  std::map<std::string, int> tensors;  // by written type; "Q8_0 (kept)" when unchanged
  std::size_t tensor_count = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
};
// Writes `output` atomically (a temporary file renamed into place). `type` must satisfy
// is_requantize_type. `on_tensor(index, count, name)` before each of the count tensors (progress). Error
// naming the file and tensor for a tensor whose type cpudl cannot convert.
RequantizeSummary requantize_gguf(
    const std::string& input, const std::string& output, std::string_view type,
    const std::function<void(std::size_t, std::size_t, const std::string&)>& on_tensor = {});

}  // namespace cpudl::llm
