// The block layouts of ggml's tensor types, by type id.
#include "llm/gguf/ggml_types.h"

namespace cpudl::llm {

const GgmlTypeInfo* ggml_type_info(std::uint32_t id) {
  static const GgmlTypeInfo kUnknown{nullptr, 0, 0};
  static const GgmlTypeInfo kTypes[] = {
      {"F32", 1, 4},      {"F16", 1, 2},      {"Q4_0", 32, 18},   {"Q4_1", 32, 20},   kUnknown,
      kUnknown,           {"Q5_0", 32, 22},   {"Q5_1", 32, 24},   {"Q8_0", 32, 34},   {"Q8_1", 32, 36},
      {"Q2_K", 256, 84},  {"Q3_K", 256, 110}, {"Q4_K", 256, 144}, {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
      {"Q8_K", 256, 292}, kUnknown,           kUnknown,           kUnknown,           kUnknown,
      kUnknown,           kUnknown,           kUnknown,           kUnknown,           {"I8", 1, 1},
      {"I16", 1, 2},      {"I32", 1, 4},      {"I64", 1, 8},      {"F64", 1, 8},      kUnknown,
      {"BF16", 1, 2},
  };
  // Ids 16-23 and 29 are the i-quants and IQ1_S; cpudl does not read them.
  if (id >= sizeof(kTypes) / sizeof(kTypes[0]) || kTypes[id].name == nullptr) return nullptr;
  return &kTypes[id];
}

}  // namespace cpudl::llm
