// The regular expressions of byte-level BPE pre-tokenizers (GPT-2, Llama 3, Qwen2, DeepSeek,
// Falcon), matched over code points with Perl/Oniguruma semantics: leftmost match, alternatives
// tried in order, greedy quantifiers that backtrack. Only what those patterns use is supported:
// literals, classes ([...], [^...], ranges, \s \S \p{L} \p{N} \p{P} \p{M} \p{S} and their \P
// negations), ? * + {m} {m,n} on single atoms, (?:...) and (?i:...) groups, and (?!atom).
//
// Written by hand rather than with std::regex: std::regex has no \p{...} classes and recurses
// per character (stack overflow on long inputs); PCRE2 would be one more dependency for five
// fixed patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cpudl::llm {

class SplitRegex {
 public:
  explicit SplitRegex(std::string_view pattern);  // Error on syntax it does not support
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;

  // Length of the match starting exactly at `pos` of `text` (0: none).
  std::size_t match_at(std::span<const std::uint32_t> text, std::size_t pos) const;

  // Splits [begin, end) of `text` into pieces (as [begin, end) pairs): each match, and each run
  // of text between matches ("isolated" splitting, as Hugging Face's Split pre-tokenizer does).
  void split(std::span<const std::uint32_t> text, std::size_t begin, std::size_t end,
             std::vector<std::pair<std::size_t, std::size_t>>& pieces) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cpudl::llm
