// Tokenizers built from a GGUF file's metadata, reproducing what the model was trained with:
// SentencePiece-style BPE by scores (tokenizer.ggml.model = "llama": Llama 1/2, Mistral, Phi-3)
// and byte-level BPE by merge ranks ("gpt2": GPT-2, Llama 3, Qwen2, DeepSeek, Falcon) with the
// pre-tokenizer named by tokenizer.ggml.pre. Special tokens, BOS/EOS and byte fallback included.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cpudl::llm {

class GgufFile;
class SplitRegex;

enum class TokenType : std::int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

class Tokenizer {
 public:
  explicit Tokenizer(const GgufFile& file);  // Error naming the key when the vocabulary is malformed
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;

  // Text to ids. add_special: BOS (and EOS) as the model's metadata asks. parse_special: text such
  // as "<s>" or "<|im_start|>" becomes that control token (user-defined tokens always do).
  std::vector<std::int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The bytes a token stands for (control tokens render as their text only when render_special).
  std::string piece(std::int32_t id, bool render_special = false) const;
  std::string decode(std::span<const std::int32_t> ids, bool render_special = false) const;

  std::int32_t vocab_size() const { return static_cast<std::int32_t>(tokens_.size()); }
  std::int32_t bos() const { return bos_; }  // -1 when the model has none
  std::int32_t eos() const { return eos_; }
  bool is_end_of_generation(std::int32_t id) const;
  std::string_view text(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  std::string_view model() const { return model_; }
  std::string_view pre() const { return pre_; }
  bool adds_bos() const { return add_bos_; }

 private:
  void encode_spm(std::string_view text, std::vector<std::int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<std::int32_t>& out) const;
  void bpe_piece(std::string_view bytes, std::vector<std::int32_t>& out) const;
  std::int32_t find(std::string_view text) const;  // -1 when absent

  std::string model_, pre_;
  bool spm_ = true;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, std::int32_t> index_;
  std::unordered_map<std::string, std::int32_t> merge_rank_;  // "left right" -> rank
  std::vector<SplitRegex> pre_regexes_;
  bool ignore_merges_ = false;          // Llama 3: a piece that is a whole token is not merged
  std::vector<std::int32_t> specials_;  // control / user-defined tokens, longest text first
  std::int32_t bos_ = -1, eos_ = -1, unk_ = -1, eot_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = true;
  std::int32_t byte_tokens_[256];  // SentencePiece <0xXX> tokens, -1 when absent
};

}  // namespace cpudl::llm
