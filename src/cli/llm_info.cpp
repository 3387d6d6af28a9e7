// `cpudl info MODEL.gguf`: what a language model holds and what loading it costs on this CPU --
// the mapping, the panels repacked at load (and the kernels that read them), the KV cache per
// token and at the context a command would use.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "cpudl/llm.h"
#include "cpudl/runtime.h"
#include "kernels/dispatch.h"
#include "llm/gguf/ggml_types.h"
#include "llm/gguf/gguf.h"

namespace cpudl::cli {
namespace {

// The kernels that read each panel kind (llm/model/weight_matmul.h) on this CPU, as its table
// names them; a reference entry (the AMX product on a CPU without AMX) reads nothing here.
std::string panel_readers(const std::string& kind) {
  const kernels::KernelTable& k = kernels::kernel_table();
  std::string names;
  const auto add = [&](const auto& entry) {
    if (entry.level != IsaLevel::generic) names += (names.empty() ? "" : ", ") + std::string(entry.name);
  };
  if (kind == "Q8_0x16") {
    add(k.q8_0x16_q8a_gemm);
    add(k.q8_0x16_q8a_dot_gemm);
    add(k.q8_0x16_q8a_gemv);
  } else if (kind == "Q4_0x16") {
    add(k.q4_0x16_q8a_gemv);
    add(k.q4_0x16_q8a_gemm);
  } else if (kind == "Q4_Kx16") {
    add(k.q4_kx16_q8_k_gemv);
  } else if (kind == "Q6_Kx16") {
    add(k.q6_kx16_q8_k_gemv);
  }
  return names;
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int run_llm_info(const std::string& path, bool json) {
  llm::ModelLoadOptions load;
  load.repack = false;  // the panels' sizes come from the plan; nothing is packed to describe them
  const llm::Model model = llm::Model::load(path, load);
  const llm::ModelConfig& c = model.config();
  const llm::GgufFile file = llm::GgufFile::open(path);
  struct TypeUse {
    int tensors = 0;
    std::uint64_t bytes = 0;
  };
  const std::uint64_t file_bytes = std::filesystem::file_size(path);
  std::map<std::string, TypeUse> types;
  for (const llm::GgufTensor& t : file.tensors()) {
    const llm::GgmlTypeInfo* info = llm::ggml_type_info(static_cast<std::uint32_t>(t.type));
    TypeUse& use = types[info ? info->name : "?"];
    ++use.tensors;
    use.bytes += t.bytes;
  }
  std::uint64_t panels = 0;
  for (const auto& [kind, bytes] : c.panel_bytes) panels += bytes;
  const int n_ctx = std::min(c.context_length, 4096);  // what generate and serve use by default
  const std::map<std::string, llm::CacheType> caches{
      {"f16", llm::CacheType::f16}, {"f32", llm::CacheType::f32}, {"q8_0", llm::CacheType::q8_0}};

  if (json) {
    nlohmann::ordered_json j{{"model", path},
                             {"format", "gguf"},
                             {"gguf_version", file.version()},
                             {"architecture", c.architecture},
                             {"name", c.name},
                             {"parameters", c.parameters},
                             {"weight_type", c.weight_type},
                             {"layers", c.layers},
                             {"dim", c.dim},
                             {"heads", c.heads},
                             {"kv_heads", c.kv_heads},
                             {"head_dim", c.head_dim},
                             {"ffn", c.ffn},
                             {"vocab", c.vocab},
                             {"context_length", c.context_length},
                             {"tokenizer", c.tokenizer},
                             {"file_bytes", file_bytes},
                             {"bytes_per_token", c.bytes_per_token}};
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    for (const auto& [name, use] : types) t[name] = {{"tensors", use.tensors}, {"bytes", use.bytes}};
    j["tensor_types"] = t;
    nlohmann::ordered_json p = nlohmann::ordered_json::object();
    for (const auto& [kind, bytes] : c.panel_bytes)
      p[kind] = {{"bytes", bytes}, {"kernels", panel_readers(kind)}};
    j["repack_panels"] = p;
    j["repack_bytes"] = panels;
    j["cache_context"] = n_ctx;
    nlohmann::ordered_json kv = nlohmann::ordered_json::object();
    for (const auto& [name, type] : caches)
      kv[name] = {{"bytes_per_token", llm::Context::cache_bytes(c, 1024, type) / 1024},
                  {"bytes", llm::Context::cache_bytes(c, n_ctx, type)}};
    j["kv_cache"] = kv;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: GGUF v%u, %s model%s%s, %.1fM parameters, %s\n", path.c_str(), file.version(),
              c.architecture.c_str(), c.name.empty() ? "" : " ",
              c.name.empty() ? "" : ("\"" + c.name + "\"").c_str(), static_cast<double>(c.parameters) / 1e6,
              byte_size_text(file_bytes).c_str());
  std::printf(
      "shape: %d layers, dim %d, %d heads (%d KV, head dim %d), ffn %d, vocab %d, context %d, tokenizer %s\n",
      c.layers, c.dim, c.heads, c.kv_heads, c.head_dim, c.ffn, c.vocab, c.context_length,
      c.tokenizer.empty() ? "none" : c.tokenizer.c_str());
  std::printf("tensors:");
  for (const auto& [name, use] : types)
    std::printf(" %s %d (%.1f MiB)", name.c_str(), use.tensors, mib(use.bytes));
  std::printf("\ngeneration reads %.1f MiB of weights per token\n", mib(c.bytes_per_token));
  if (c.panel_bytes.empty()) {
    std::printf("repacked at load on this CPU: nothing (%s: its products read the mapped rows)\n",
                c.weight_type.c_str());
  } else {
    std::printf(
        "repacked at load on this CPU: %.1f MiB besides the %.1f MiB mapping (--no-repack skips it)\n",
        mib(panels), mib(file_bytes));
    for (const auto& [kind, bytes] : c.panel_bytes)
      std::printf("  %s panels %.1f MiB, read by %s\n", kind.c_str(), mib(bytes),
                  panel_readers(kind).c_str());
  }
  std::printf("KV cache at %d positions (--ctx):", n_ctx);
  for (const auto& [name, type] : caches)
    std::printf(" %s %.1f MiB (%.1f KiB a token)", name.c_str(),
                mib(llm::Context::cache_bytes(c, n_ctx, type)),
                static_cast<double>(llm::Context::cache_bytes(c, 1024, type)) / 1024 / 1024);
  std::printf("\n");
  return 0;
}

}  // namespace cpudl::cli
