// GGUF re-encoding (requantize.h).
#include "llm/gguf/requantize.h"

#include <charconv>
#include <vector>

#include "cpudl/error.h"
#include "llm/gguf/gguf.h"
#include "llm/gguf/quantize.h"

namespace cpudl::llm {
namespace {

struct TargetType {
  std::string_view name;
  GgmlType type;
  std::uint32_t file_type;  // general.file_type as llama.cpp numbers it
};
constexpr TargetType kTargets[] = {{"f32", GgmlType::f32, 0},      {"f16", GgmlType::f16, 1},
                                   {"bf16", GgmlType::bf16, 32},   {"q8_0", GgmlType::q8_0, 7},
                                   {"q4_0", GgmlType::q4_0, 2},    {"q4_k", GgmlType::q4_k, 14},
                                   {"q4_k_m", GgmlType::q4_k, 15}, {"q6_k", GgmlType::q6_k, 18}};

const TargetType* find_target(std::string_view name) {
  for (const TargetType& t : kTargets)
    if (t.name == name) return &t;
  return nullptr;
}

const char* type_name(GgmlType t) { return ggml_type_info(static_cast<std::uint32_t>(t))->name; }

}  // namespace

std::string_view requantize_type_names() { return "f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_m or q6_k"; }
bool is_requantize_type(std::string_view name) { return find_target(name) != nullptr; }

// Q4_K everywhere but the output matrix and, in the first and last eighth of the layers and every
// third one between, the attention values and the feed-forward down projection, which take Q6_K
// (the tensors whose error costs the most perplexity). A tensor's layer is read from its blk.N.
// name.
GgmlType q4_k_m_type(std::string_view name, std::int64_t layers) {
  if (name == "output.weight") return GgmlType::q6_k;
  const bool values = name.ends_with(".attn_v.weight"), down = name.ends_with(".ffn_down.weight");
  if (!name.starts_with("blk.") || !(values || down) || layers < 1) return GgmlType::q4_k;
  std::int64_t i = 0;
  if (std::from_chars(name.data() + 4, name.data() + name.size(), i).ec != std::errc{}) return GgmlType::q4_k;
  const std::int64_t n = layers;
  const bool more_bits = i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
  return more_bits ? GgmlType::q6_k : GgmlType::q4_k;
}

RequantizeSummary requantize_gguf(
    const std::string& input, const std::string& output, std::string_view type,
    const std::function<void(std::size_t, std::size_t, const std::string&)>& on_tensor) {
  const TargetType* target = find_target(type);
  if (target == nullptr)
    throw Error("GGUF type '" + std::string(type) + "': expected " + std::string(requantize_type_names()));
  const GgufFile in = GgufFile::open(input);
  const bool mixed = type == "q4_k_m";
  const std::int64_t layers =
      mixed && in.has("general.architecture")
          ? in.get_int(std::string(in.get_string("general.architecture")) + ".block_count", 0)
          : 0;
  std::vector<GgufWriterValue> metadata;
  for (const auto& [key, value] : in.metadata()) {
    if (key == "general.alignment") continue;  // written by write_gguf when not the default
    GgufWriterValue v{key, value};
    if (key == "general.file_type") {
      v.value.type = GgufValueType::u32;
      v.value.i = target->file_type;
    }
    metadata.push_back(std::move(v));
  }
  RequantizeSummary summary;
  std::vector<std::vector<std::uint8_t>> buffers;
  std::vector<GgufWriterTensor> tensors;
  buffers.reserve(in.tensors().size());
  for (const GgufTensor& t : in.tensors()) {
    if (on_tensor) on_tensor(tensors.size(), in.tensors().size(), t.name);
    summary.bytes_in += t.bytes;
    GgmlType to = t.dims.size() < 2 ? t.type : mixed ? q4_k_m_type(t.name, layers) : target->type;
    const std::uint32_t block = ggml_type_info(static_cast<std::uint32_t>(to))->block_size;
    if (t.dims[0] % block != 0)
      to = t.dims[0] % 32 == 0 ? GgmlType::q8_0 : GgmlType::f16;  // rows too short for the type
    if (to == t.type) {
      tensors.push_back({t.name, t.type, t.dims, {t.data, t.bytes}});
      summary.bytes_out += t.bytes;
      ++summary.tensors[std::string(type_name(to)) + " (kept)"];
      continue;
    }
    if (!is_compute_type(t.type))
      throw Error(in.name() + ": tensor '" + t.name + "' has type " + type_name(t.type) +
                  ", which cpudl cannot convert");
    const std::size_t cols = t.dims[0], rows = t.elements() / cols;
    const std::size_t in_row = row_bytes(t.type, cols), out_row = row_bytes(to, cols);
    std::vector<std::uint8_t>& out = buffers.emplace_back(rows * out_row);
    std::vector<float> row(cols);
    for (std::size_t r = 0; r < rows; ++r) {
      dequantize_row(t.type, t.data + r * in_row, row.data(), cols);
      quantize_row(to, row.data(), out.data() + r * out_row, cols);
    }
    tensors.push_back({t.name, to, t.dims, {out.data(), out.size()}});
    summary.bytes_out += out.size();
    ++summary.tensors[type_name(to)];
  }
  write_gguf(output, metadata, tensors, in.alignment());
  summary.tensor_count = tensors.size();
  return summary;
}

}  // namespace cpudl::llm
