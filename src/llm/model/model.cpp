// Loading a Llama-family model: the hyper-parameters from the GGUF metadata (keys prefixed by
// the architecture, as llama.cpp's converter writes them), then every tensor checked for
// presence, type and shape before anything runs.
#include <algorithm>

#include "cpudl/error.h"
#include "cpudl/runtime.h"
#include "llm/gguf/quantize.h"
#include "llm/model/model_impl.h"
#include "llm/model/weight_matmul.h"

namespace cpudl::llm {

namespace {

std::string type_name(GgmlType t) { return ggml_type_info(static_cast<std::uint32_t>(t))->name; }

WeightMatrix matrix(const GgufFile& f, const std::string& name, std::size_t rows, std::size_t cols) {
  const GgufTensor& t = f.tensor(name);
  auto shape = [](std::size_t a, std::size_t b) {
    return "[" + std::to_string(a) + ", " + std::to_string(b) + "]";
  };
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows)
    throw Error(f.name() + ": tensor '" + name + "' has GGUF shape [" +
                [&] {
                  std::string s;
                  for (auto d : t.dims) s += (s.empty() ? "" : ", ") + std::to_string(d);
                  return s;
                }() +
                "], expected " + shape(cols, rows));
  if (!is_compute_type(t.type))
    throw Error(f.name() + ": tensor '" + name + "' has type " + type_name(t.type) +
                ", which cpudl cannot compute with (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)");
  return {name, t.type, t.data, rows, cols, row_bytes(t.type, cols), nullptr};
}

std::vector<float> vector_of(const GgufFile& f, const std::string& name, std::size_t n) {
  const GgufTensor& t = f.tensor(name);
  if (t.dims.size() != 1 || t.dims[0] != n)
    throw Error(f.name() + ": tensor '" + name + "' should be a vector of " + std::to_string(n));
  if (!is_compute_type(t.type))
    throw Error(f.name() + ": tensor '" + name + "' has type " + type_name(t.type));
  std::vector<float> v(n);
  dequantize_row(t.type, t.data, v.data(), n);
  return v;
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
const ModelConfig& Model::config() const { return impl_->config; }

Model Model::load(const std::filesystem::path& path, const ModelLoadOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->file = GgufFile::open(path);
  const GgufFile& f = impl->file;
  ModelConfig& c = impl->config;
  c.architecture = std::string(f.get_string("general.architecture"));
  if (c.architecture != "llama" && c.architecture != "qwen2")
    throw Error(f.name() + ": architecture '" + c.architecture +
                "' is not supported (expected llama or qwen2)");
  c.name = f.has("general.name") ? std::string(f.get_string("general.name")) : path.stem().string();
  const std::string a = c.architecture + ".";
  auto positive = [&](const std::string& key, std::int64_t value, std::int64_t max) {
    if (value <= 0 || value > max)
      throw Error(f.name() + ": metadata '" + key + "' is " + std::to_string(value) + " (expected 1 to " +
                  std::to_string(max) + ")");
    return static_cast<int>(value);
  };
  c.dim = positive(a + "embedding_length", f.get_int(a + "embedding_length"), 1 << 16);
  c.layers = positive(a + "block_count", f.get_int(a + "block_count"), 1024);
  c.heads = positive(a + "attention.head_count", f.get_int(a + "attention.head_count"), 1024);
  c.kv_heads =
      positive(a + "attention.head_count_kv", f.get_int(a + "attention.head_count_kv", c.heads), 1024);
  c.ffn = positive(a + "feed_forward_length", f.get_int(a + "feed_forward_length"), 1 << 20);
  c.context_length = positive(a + "context_length", f.get_int(a + "context_length"), 1 << 24);
  if (c.dim % c.heads != 0 || c.heads % c.kv_heads != 0)
    throw Error(f.name() + ": embedding_length " + std::to_string(c.dim) + ", head_count " +
                std::to_string(c.heads) + " and head_count_kv " + std::to_string(c.kv_heads) +
                " do not divide evenly");
  c.head_dim = c.dim / c.heads;
  c.rope_dims =
      positive(a + "rope.dimension_count", f.get_int(a + "rope.dimension_count", c.head_dim), c.head_dim);
  if (c.rope_dims % 2 != 0) throw Error(f.name() + ": rope.dimension_count must be even");
  c.rope_base = static_cast<float>(f.get_float(a + "rope.freq_base", 10000.0));
  c.rms_epsilon = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_neox = c.architecture == "qwen2";
  if (f.has(a + "rope.scaling.type")) {
    const std::string_view scaling = f.get_string(a + "rope.scaling.type");
    if (scaling == "linear") {
      c.rope_scale = static_cast<float>(f.get_float(a + "rope.scaling.factor", 1.0));
    } else if (scaling != "none") {
      throw Error(f.name() + ": rope.scaling.type '" + std::string(scaling) +
                  "' is not supported (none or linear)");
    }
  }
  if (!(c.rope_base > 0) || !(c.rms_epsilon > 0) || !(c.rope_scale > 0))
    throw Error(f.name() +
                ": rope.freq_base, rope.scaling.factor and layer_norm_rms_epsilon must be positive");

  const GgufTensor& embd = f.tensor("token_embd.weight");
  if (embd.dims.size() != 2 || embd.dims[0] != static_cast<std::uint64_t>(c.dim))
    throw Error(f.name() + ": tensor 'token_embd.weight' should have rows of " + std::to_string(c.dim));
  c.vocab = positive("token_embd.weight rows", static_cast<std::int64_t>(embd.dims[1]), 1 << 24);
  const auto dim = static_cast<std::size_t>(c.dim), kvd = static_cast<std::size_t>(c.kv_heads * c.head_dim),
             ffn = static_cast<std::size_t>(c.ffn), vocab = static_cast<std::size_t>(c.vocab);
  impl->token_embedding = matrix(f, "token_embd.weight", vocab, dim);
  impl->output_norm = vector_of(f, "output_norm.weight", dim);
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  impl->output = c.tied_output ? impl->token_embedding : matrix(f, "output.weight", vocab, dim);
  const bool biases = c.architecture == "qwen2";
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights w;
    w.attn_norm = vector_of(f, p + "attn_norm.weight", dim);
    w.ffn_norm = vector_of(f, p + "ffn_norm.weight", dim);
    w.q = matrix(f, p + "attn_q.weight", dim, dim);
    w.k = matrix(f, p + "attn_k.weight", kvd, dim);
    w.v = matrix(f, p + "attn_v.weight", kvd, dim);
    w.o = matrix(f, p + "attn_output.weight", dim, dim);
    w.gate = matrix(f, p + "ffn_gate.weight", ffn, dim);
    w.up = matrix(f, p + "ffn_up.weight", ffn, dim);
    w.down = matrix(f, p + "ffn_down.weight", dim, ffn);
    if (biases) {
      w.q_bias = vector_of(f, p + "attn_q.bias", dim);
      w.k_bias = vector_of(f, p + "attn_k.bias", kvd);
      w.v_bias = vector_of(f, p + "attn_v.bias", kvd);
    }
    impl->layers.push_back(std::move(w));
  }
  // The matrices repacked where the CPU has a faster product over panels (weight_matmul.h:
  // repack_at_load), the output matrix included: generation reads it every token, a fifth of a
  // small model's bytes per token.
  std::vector<WeightMatrix*> matrices{&impl->output};
  for (LayerWeights& l : impl->layers)
    matrices.insert(matrices.end(), {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down});
  for (WeightMatrix* w : matrices) {
    const PanelPlan plan = panel_plan(*w);
    for (const auto& [kind, bytes] : {std::pair{"Q8_0x16", plan.tile}, std::pair{"Q4_0x16", plan.q4_0},
                                      std::pair{"Q4_Kx16", plan.q4_k}, std::pair{"Q6_Kx16", plan.q6_k}})
      if (bytes) c.panel_bytes[kind] += bytes;
    if (options.repack) c.repacked_bytes += repack_at_load(*w, compute_threads());
  }
  c.weight_type = type_name(impl->layers.empty() ? impl->output.type : impl->layers[0].q.type);
  for (const GgufTensor& t : f.tensors()) {
    c.parameters += t.elements();
    c.weight_bytes += t.bytes;
  }
  c.bytes_per_token = impl->output.rows * impl->output.row_bytes;
  for (const LayerWeights& l : impl->layers)
    for (const WeightMatrix* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      c.bytes_per_token += w->rows * w->row_bytes;
  if (f.has("tokenizer.ggml.model")) {
    impl->tokenizer.emplace(f);
    c.tokenizer = std::string(impl->tokenizer->model());
    if (impl->tokenizer->vocab_size() > c.vocab)
      throw Error(f.name() + ": the tokenizer has " + std::to_string(impl->tokenizer->vocab_size()) +
                  " tokens but token_embd.weight only " + std::to_string(c.vocab) + " rows");
  }
  return Model(std::move(impl));
}

namespace {
const Tokenizer& tokenizer_of(const Model::Impl& impl) {
  if (!impl.tokenizer)
    throw Error(impl.file.name() + ": the file has no tokenizer (tokenizer.ggml.model is missing)");
  return *impl.tokenizer;
}
}  // namespace

std::vector<std::int32_t> Model::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return tokenizer_of(*impl_).encode(text, add_special, parse_special);
}
std::string Model::token_text(std::int32_t id) const { return tokenizer_of(*impl_).piece(id); }
std::string Model::detokenize(std::span<const std::int32_t> ids) const {
  return tokenizer_of(*impl_).decode(ids);
}
bool Model::is_end_of_generation(std::int32_t id) const {
  return impl_->tokenizer && impl_->tokenizer->is_end_of_generation(id);
}
std::int32_t Model::bos() const { return impl_->tokenizer ? impl_->tokenizer->bos() : -1; }
std::string Model::chat_template() const {
  return impl_->file.has("tokenizer.chat_template")
             ? std::string(impl_->file.get_string("tokenizer.chat_template"))
             : "";
}

}  // namespace cpudl::llm
