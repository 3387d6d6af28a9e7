// Tokenizer construction, special-token splitting and decoding; the two algorithms follow.
#include "llm/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "cpudl/error.h"
#include "llm/gguf/gguf.h"
#include "llm/tokenizer/split_regex.h"
#include "llm/tokenizer/unicode.h"

namespace cpudl::llm {

namespace {

// GPT-2's reversible byte <-> printable code point map: printable Latin-1 bytes map to
// themselves, the other 68 to U+0100 onwards in byte order.
struct ByteLevelMap {
  std::uint32_t to_cp[256];
  std::unordered_map<std::uint32_t, std::uint8_t> to_byte;
  ByteLevelMap() {
    std::uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<std::uint32_t>(b) : extra++;
      to_byte[to_cp[b]] = static_cast<std::uint8_t>(b);
    }
  }
};
const ByteLevelMap& byte_level() {
  static const ByteLevelMap map;
  return map;
}

// The pre-tokenizer regexes of each tokenizer.ggml.pre family (from the models' own
// tokenizer.json), applied in sequence, each splitting the pieces of the previous.
const char* const kGpt2[] = {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"};
const char* const kLlama3[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const char* const kQwen2[] = {
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
const char* const kDeepseekCoder[] = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
                                      "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+", R"(\p{N})"};
const char* const kFalcon[] = {R"([\p{P}\$\+<=>\^~\|`]+)",
                               R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
                               R"([0-9][0-9][0-9])"};

struct PreTokenizer {
  const char* name;
  std::span<const char* const> regexes;
  bool ignore_merges;
};
const PreTokenizer kPreTokenizers[] = {
    {"default", kGpt2, false},    {"gpt-2", kGpt2, false},
    {"gpt2", kGpt2, false},       {"llama3", kLlama3, true},
    {"llama-bpe", kLlama3, true}, {"llama-v3", kLlama3, true},
    {"qwen2", kQwen2, false},     {"deepseek-coder", kDeepseekCoder, false},
    {"falcon", kFalcon, false},
};

}  // namespace

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;

Tokenizer::Tokenizer(const GgufFile& file) {
  const std::string& name = file.name();
  model_ = std::string(file.get_string("tokenizer.ggml.model"));
  if (model_ == "llama") {
    spm_ = true;
  } else if (model_ == "gpt2") {
    spm_ = false;
  } else {
    throw Error(name + ": tokenizer.ggml.model '" + model_ + "' is not supported (expected llama or gpt2)");
  }
  const auto& tokens = file.get_strings("tokenizer.ggml.tokens");
  if (tokens.empty() || tokens.size() > (1u << 24))
    throw Error(name + ": tokenizer.ggml.tokens holds " + std::to_string(tokens.size()) + " tokens");
  const std::size_t n = tokens.size();
  tokens_.assign(tokens.begin(), tokens.end());
  scores_.assign(n, 0.0f);
  if (file.has("tokenizer.ggml.scores")) {
    const auto& s = file.get_numbers("tokenizer.ggml.scores");
    if (s.size() != n)
      throw Error(name + ": tokenizer.ggml.scores has " + std::to_string(s.size()) + " entries, expected " +
                  std::to_string(n));
    for (std::size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(s[i]);
  }
  types_.assign(n, TokenType::normal);
  if (file.has("tokenizer.ggml.token_type")) {
    const auto& t = file.get_numbers("tokenizer.ggml.token_type");
    if (t.size() != n)
      throw Error(name + ": tokenizer.ggml.token_type has " + std::to_string(t.size()) +
                  " entries, expected " + std::to_string(n));
    for (std::size_t i = 0; i < n; ++i) {
      if (t[i] < 0 || t[i] > 6)
        throw Error(name + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is " +
                    std::to_string(t[i]) + " (expected 0 to 6)");
      types_[i] = static_cast<TokenType>(static_cast<int>(t[i]));
    }
  }
  index_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) index_.emplace(tokens_[i], static_cast<std::int32_t>(i));

  auto special_id = [&](const char* key, std::int32_t fallback) -> std::int32_t {
    const std::int64_t id = file.get_int(key, fallback);
    if (id < -1 || id >= static_cast<std::int64_t>(n))
      throw Error(name + ": " + key + " is " + std::to_string(id) + ", outside the vocabulary of " +
                  std::to_string(n));
    return static_cast<std::int32_t>(id);
  };
  bos_ = special_id("tokenizer.ggml.bos_token_id", spm_ ? 1 : -1);
  eos_ = special_id("tokenizer.ggml.eos_token_id", spm_ ? 2 : -1);
  unk_ = special_id("tokenizer.ggml.unknown_token_id", spm_ ? 0 : -1);
  eot_ = special_id("tokenizer.ggml.eot_token_id", -1);
  if (eot_ < 0)  // chat models end turns with these even when the metadata names another EOS
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"})
      if (const std::int32_t id = find(t);
          id >= 0 && types_[static_cast<std::size_t>(id)] == TokenType::control) {
        eot_ = id;
        break;
      }
  add_bos_ = file.get_bool("tokenizer.ggml.add_bos_token", spm_);
  add_eos_ = file.get_bool("tokenizer.ggml.add_eos_token", false);
  add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix", spm_);

  for (std::size_t i = 0; i < n; ++i)
    if ((types_[i] == TokenType::control || types_[i] == TokenType::user_defined) && !tokens_[i].empty())
      specials_.push_back(static_cast<std::int32_t>(i));
  std::stable_sort(specials_.begin(), specials_.end(), [&](std::int32_t a, std::int32_t b) {
    return tokens_[static_cast<std::size_t>(a)].size() > tokens_[static_cast<std::size_t>(b)].size();
  });

  if (spm_) {
    char buf[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      byte_tokens_[b] = find(buf);
    }
    return;
  }
  for (int b = 0; b < 256; ++b) byte_tokens_[b] = -1;
  const auto& merges = file.get_strings("tokenizer.ggml.merges");
  merge_rank_.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    // A merge is "left right"; the left part never contains a space (byte-level text has none).
    if (merges[i].find(' ', 1) == std::string_view::npos)
      throw Error(name + ": tokenizer.ggml.merges[" + std::to_string(i) +
                  "] is not two tokens separated by a space");
    merge_rank_.emplace(std::string(merges[i]), static_cast<std::int32_t>(i));
  }
  pre_ = file.has("tokenizer.ggml.pre") ? std::string(file.get_string("tokenizer.ggml.pre")) : "default";
  const PreTokenizer* pre = nullptr;
  for (const auto& p : kPreTokenizers)
    if (pre_ == p.name) pre = &p;
  if (pre == nullptr) {
    std::string known;
    for (const auto& p : kPreTokenizers) known += std::string(known.empty() ? "" : ", ") + p.name;
    throw Error(name + ": tokenizer.ggml.pre '" + pre_ + "' is not a pre-tokenizer cpudl knows (" + known +
                ")");
  }
  for (const char* regex : pre->regexes) pre_regexes_.emplace_back(regex);
  ignore_merges_ = pre->ignore_merges;
}

std::int32_t Tokenizer::find(std::string_view text) const {
  const auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

bool Tokenizer::is_end_of_generation(std::int32_t id) const { return id >= 0 && (id == eos_ || id == eot_); }

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                            bool parse_special) const {
  std::vector<std::int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  // Special tokens are cut out of the text first; only the text between them is tokenized.
  bool previous_special = true;  // SentencePiece prefixes a space to text at the start or after a special
  std::size_t start = 0;
  auto flush = [&](std::size_t end) {
    if (end <= start) return;
    const std::string_view raw = text.substr(start, end - start);
    if (spm_) {
      std::string escaped;
      if (add_space_prefix_ && previous_special) escaped = "\xE2\x96\x81";
      for (char c : raw) escaped += c == ' ' ? std::string_view("\xE2\x96\x81") : std::string_view(&c, 1);
      encode_spm(escaped, out);
    } else {
      encode_bpe(raw, out);
    }
    previous_special = false;
  };
  for (std::size_t i = 0; i < text.size();) {
    std::int32_t hit = -1;
    for (std::int32_t id : specials_) {
      const auto type = types_[static_cast<std::size_t>(id)];
      if (!parse_special && type != TokenType::user_defined) continue;
      const std::string& t = tokens_[static_cast<std::size_t>(id)];
      if (text.compare(i, t.size(), t) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    flush(i);
    out.push_back(hit);
    previous_special = true;
    i += tokens_[static_cast<std::size_t>(hit)].size();
    start = i;
  }
  flush(text.size());
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

// SentencePiece BPE: start from code points and repeatedly merge the adjacent pair whose union is
// the highest-scoring token (leftmost on ties); what no token covers falls back to byte tokens.
void Tokenizer::encode_spm(std::string_view text, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::size_t begin, size;
    int prev, next;
  };
  std::vector<Symbol> symbols;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = std::min(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    symbols.push_back({i, len, static_cast<int>(symbols.size()) - 1, static_cast<int>(symbols.size()) + 1});
    i += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  struct Bigram {
    int left, right;
    float score;
    std::size_t size;
    bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
  };
  std::priority_queue<Bigram> queue;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const auto& l = symbols[static_cast<std::size_t>(left)];
    const auto& r = symbols[static_cast<std::size_t>(right)];
    const std::int32_t id = find(text.substr(l.begin, l.size + r.size));
    if (id < 0) return;
    queue.push({left, right, scores_[static_cast<std::size_t>(id)], l.size + r.size});
  };
  for (std::size_t i = 1; i < symbols.size(); ++i) try_pair(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    auto& l = symbols[static_cast<std::size_t>(b.left)];
    auto& r = symbols[static_cast<std::size_t>(b.right)];
    if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;  // stale: a side merged since
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<std::size_t>(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  for (int i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    const auto& s = symbols[static_cast<std::size_t>(i)];
    const std::string_view piece = text.substr(s.begin, s.size);
    if (const std::int32_t id = find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const std::int32_t byte_id = byte_tokens_[static_cast<unsigned char>(c)];
      if (byte_id >= 0)
        out.push_back(byte_id);
      else if (unk_ >= 0)
        out.push_back(unk_);
    }
  }
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<std::int32_t>& out) const {
  std::vector<std::size_t> offsets;
  const std::vector<std::uint32_t> cps = utf8_decode(text, &offsets);
  offsets.push_back(text.size());
  std::vector<std::pair<std::size_t, std::size_t>> pieces{{0, cps.size()}}, next;
  for (const SplitRegex& regex : pre_regexes_) {
    next.clear();
    for (const auto& [b, e] : pieces) regex.split(cps, b, e, next);
    pieces.swap(next);
  }
  for (const auto& [b, e] : pieces) bpe_piece(text.substr(offsets[b], offsets[e] - offsets[b]), out);
}

// Byte-level BPE of one pre-tokenized piece: map its bytes to GPT-2's printable code points,
// then merge the adjacent pair of lowest rank until none is in the merge list.
void Tokenizer::bpe_piece(std::string_view bytes, std::vector<std::int32_t>& out) const {
  const ByteLevelMap& map = byte_level();
  std::vector<std::string> parts;
  parts.reserve(bytes.size());
  std::string whole;
  for (char c : bytes) {
    std::string s;
    utf8_append(s, map.to_cp[static_cast<unsigned char>(c)]);
    whole += s;
    parts.push_back(std::move(s));
  }
  if (ignore_merges_)
    if (const std::int32_t id = find(whole); id >= 0) {
      out.push_back(id);
      return;
    }
  std::string key;
  while (parts.size() > 1) {
    std::int32_t best_rank = INT32_MAX;
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      key.assign(parts[i]).append(" ").append(parts[i + 1]);
      const auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (const std::string& p : parts) {
    if (const std::int32_t id = find(p); id >= 0) {
      out.push_back(id);
      continue;
    }
    // A merge result missing from the vocabulary: emit its single byte-level characters.
    for (std::uint32_t cp : utf8_decode(p)) {
      std::string one;
      utf8_append(one, cp);
      const std::int32_t id = find(one);
      if (id >= 0)
        out.push_back(id);
      else if (unk_ >= 0)
        out.push_back(unk_);
    }
  }
}

std::string Tokenizer::piece(std::int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                std::to_string(vocab_size()));
  const std::string& t = tokens_[static_cast<std::size_t>(id)];
  const TokenType type = types_[static_cast<std::size_t>(id)];
  if (type == TokenType::control || type == TokenType::unknown || type == TokenType::unused)
    return render_special ? t : std::string();
  if (spm_) {
    if (type == TokenType::byte && t.size() == 6 && t.rfind("<0x", 0) == 0)
      return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    std::string out;
    for (std::size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += t[i++];
      }
    }
    return out;
  }
  if (type == TokenType::user_defined) return t;
  const ByteLevelMap& map = byte_level();
  std::string out;
  for (std::uint32_t cp : utf8_decode(t)) {
    const auto it = map.to_byte.find(cp);
    if (it != map.to_byte.end())
      out += static_cast<char>(it->second);
    else
      utf8_append(out, cp);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool render_special) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::string p = piece(ids[i], render_special);
    // SentencePiece's prefix space belongs to the encoding, not the text.
    const bool first_text = i == 0 || (i == 1 && ids[0] == bos_);
    if (spm_ && add_space_prefix_ && first_text && !p.empty() && p[0] == ' ') p.erase(0, 1);
    out += p;
  }
  return out;
}

}  // namespace cpudl::llm
