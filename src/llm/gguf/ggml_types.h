// The GGUF reader's table of ggml's tensor types: name, block size and bytes per block, by id.
#pragma once

#include <cstdint>

#include "kernels/quant/ggml_blocks.h"

namespace cpudl::llm {

struct GgmlTypeInfo {
  const char* name;  // as llama.cpp and the GGUF docs spell it: "Q4_K", "F16"
  std::uint32_t block_size;
  std::uint32_t block_bytes;
};

// Null when `id` is not a type cpudl knows (the error then names the id).
const GgmlTypeInfo* ggml_type_info(std::uint32_t id);

}  // namespace cpudl::llm
