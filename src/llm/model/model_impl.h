// What a loaded model holds: the mapped file, its tokenizer, the configuration, and views of
// every weight matrix in place in the mapping (norm vectors and biases, small, copied as floats).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cpudl/llm.h"
#include "kernels/kernel_types.h"
#include "llm/gguf/gguf.h"
#include "llm/tokenizer/tokenizer.h"

namespace cpudl::llm {

// rows x cols, row-major, each row `row_bytes` in `type`'s blocks.
struct WeightMatrix {
  std::string name;
  GgmlType type = GgmlType::f32;
  const std::uint8_t* data = nullptr;
  std::size_t rows = 0, cols = 0, row_bytes = 0;
  // On AMX CPUs, Q8_0 and Q4_0 matrices repacked at load for the prompt products (and Q8_0's
  // generation): sixteen rows at a time, cols / 32 blocks per group (weight_matmul.h:
  // repack_at_load). Null otherwise.
  std::shared_ptr<const kernels::Q8_0x16Block[]> tile_panels = nullptr;
  // On VNNI CPUs, a Q4_0 matrix's rows repacked at load for generation, 4 bits a value
  // (kernel_types.h's Q4_0x16Block), in the same groups. Null otherwise.
  std::shared_ptr<const kernels::Q4_0x16Block[]> gen_panels = nullptr;
  // On VNNI CPUs, a Q4_K matrix's rows repacked at load for generation (kernel_types.h's
  // Q4_Kx16Block), sixteen rows at a time, cols / 256 blocks per group. Null otherwise.
  std::shared_ptr<const kernels::Q4_Kx16Block[]> q4_k_panels = nullptr;
  // The same for a Q6_K matrix (kernel_types.h's Q6_Kx16Block): Q4_K_M files keep the output
  // matrix and half the attention values and down projections in Q6_K.
  std::shared_ptr<const kernels::Q6_Kx16Block[]> q6_k_panels = nullptr;
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm, q_bias, k_bias, v_bias;  // biases empty for llama
  WeightMatrix q, k, v, o, gate, up, down;
};

struct Model::Impl {
  GgufFile file;
  std::optional<Tokenizer> tokenizer;
  ModelConfig config;
  WeightMatrix token_embedding, output;
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;
};

}  // namespace cpudl::llm
