// Llama-family language models from GGUF files: load (memory-mapped, validated), tokenize, run
// with a KV cache, sample. Architectures `llama` (Llama 1/2/3, TinyLlama, Mistral-style GQA) and
// `qwen2` (Q/K/V biases); weights F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K.
//
//   auto model = cpudl::llm::Model::load("m.gguf");
//   cpudl::llm::Context ctx(model, {.n_ctx = 512});
//   ctx.eval(model.tokenize("Hello", true));
//   int next = cpudl::llm::Sampler({}).sample(ctx.logits(), ctx.vocab_size());
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cpudl::llm {

struct ModelConfig {
  std::string architecture;  // "llama" or "qwen2"
  std::string name;          // general.name
  std::string weight_type;   // type of the attention/FFN matrices, e.g. "Q4_0"
  int vocab = 0, dim = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  int context_length = 0;  // what the model was trained for
  int rope_dims = 0;
  bool rope_neox = false;  // rotate (i, i + d/2) pairs (qwen2) rather than adjacent ones (llama)
  float rope_base = 10000.0f, rope_scale = 1.0f, rms_epsilon = 1e-5f;
  bool tied_output = false;
  std::uint64_t parameters = 0, weight_bytes = 0;
  // Weight bytes one generated token reads: every matrix of every layer and the output matrix
  // (the embedding gives one row). What generation's bandwidth share is computed from.
  std::uint64_t bytes_per_token = 0;
  // Memory taken besides the mapping by the panels made at load (panel_bytes summed; 0 when
  // loaded without repacking).
  std::uint64_t repacked_bytes = 0;
  // The panels repacking at load makes on this CPU, made or not (ModelLoadOptions::repack): bytes
  // by panel block ("Q8_0x16", "Q4_0x16", "Q4_Kx16", "Q6_Kx16"; kernels/kernel_types.h).
  std::map<std::string, std::uint64_t> panel_bytes;
  std::string tokenizer;  // tokenizer.ggml.model ("llama": SentencePiece, "gpt2": byte-level BPE), or ""
};

struct ModelLoadOptions {
  // Repack Q8_0/Q4_0/Q4_K/Q6_K matrices at load into the panels the CPU's fastest products read (AMX
  // tiles, VNNI generation panels; weight_matmul.h): memory besides the mapping for speed. Off
  // for a model that computes nothing (tokenize) or to save that memory (llama.cpp's --no-repack).
  bool repack = true;
};

class Model {
 public:
  // Maps and validates the file: metadata, every tensor's presence, type and shape. Errors name
  // the file and the key or tensor.
  static Model load(const std::filesystem::path& path, const ModelLoadOptions& options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelConfig& config() const;
  // Text to token ids; with add_special, BOS as the model asks; with parse_special, control
  // tokens written in the text (such as "<|im_start|>") become those tokens.
  std::vector<std::int32_t> tokenize(std::string_view text, bool add_special,
                                     bool parse_special = true) const;
  std::string token_text(std::int32_t id) const;  // the bytes it decodes to (empty for control tokens)
  std::string detokenize(std::span<const std::int32_t> ids) const;
  bool is_end_of_generation(std::int32_t id) const;
  std::int32_t bos() const;
  // tokenizer.chat_template, when the file has one.
  std::string chat_template() const;

  struct Impl;

 private:
  friend class Context;  // runs the forward pass over the mapped weights
  const Impl& impl() const { return *impl_; }
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

enum class CacheType { f32, f16, q8_0 };
CacheType parse_cache_type(std::string_view name);  // UsageError for others

struct ContextOptions {
  int n_ctx = 0;  // 0: the model's context length, capped at 4096
  CacheType cache_type = CacheType::f16;
  int threads = 0;  // each eval runs on this many threads, whatever other contexts use; 0: compute_threads()
  int batch = 256;  // prompt tokens evaluated per step
};

// A KV cache and the buffers of one sequence. Not thread-safe; the model is shared read-only.
class Context {
 public:
  Context(const Model& model, const ContextOptions& options);
  ~Context();

  // Runs tokens at positions n_past() ... and appends them to the cache. Logits are kept for
  // the last token, or for every token when all_logits. Error for ids outside the vocabulary
  // or when the context would overflow.
  void eval(std::span<const std::int32_t> tokens, bool all_logits = false);
  // The threads the next evals run on, at most the count the context was made with (its per-thread
  // scratch is sized for that): what a governor changes between tokens.
  void set_threads(int threads);
  // Several contexts' next tokens in one forward pass: the weight products run once over all their
  // rows (what makes concurrent generations cost little more than one), each context attends to
  // its own cache and keeps its last token's logits. The contexts must come from one model with
  // the same context size and cache type; the pass runs on the first one's threads and buffers,
  // so the tokens together are at most its batch.
  struct SequenceTokens {
    Context* context;
    std::span<const std::int32_t> tokens;
  };
  static void eval_batch(std::span<const SequenceTokens> sequences);
  const float* logits(std::size_t i = 0) const;  // i-th kept row (0 = the last token unless all_logits)
  int vocab_size() const;
  int n_past() const;
  int n_ctx() const;
  void reset();
  // The bytes of the KV cache a context of n_ctx positions holds for this model (written as the
  // context fills: pages commit as positions arrive).
  static std::uint64_t cache_bytes(const ModelConfig& config, int n_ctx, CacheType type);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct SamplerOptions {
  float temperature = 0.8f;     // 0: greedy
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  float repeat_penalty = 1.0f;  // 1: off; divides positive logits of recent tokens, multiplies negative ones
  int repeat_last_n = 64;
  std::uint64_t seed = 0;
  // Added to a token's logit before anything else (-inf forbids the token), as llama.cpp's
  // --logit-bias; ids outside the vocabulary are the caller's to refuse.
  std::vector<std::pair<std::int32_t, float>> logit_bias = {};
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  // Picks the next token from logits; `recent` are the last tokens (for the repetition penalty).
  std::int32_t sample(const float* logits, int vocab, std::span<const std::int32_t> recent = {});

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, std::int32_t>> candidates_;  // reused from token to token
  std::vector<double> probabilities_;
};

}  // namespace cpudl::llm
