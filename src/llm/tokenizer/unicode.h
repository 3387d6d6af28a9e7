// The slice of Unicode the tokenizers need: UTF-8 decoding that never fails (invalid bytes
// decode as U+FFFD, one byte each), general-category flags, and White_Space.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cpudl::llm {

enum UnicodeFlag : std::uint8_t {
  kLetter = 1,       // \p{L}
  kNumber = 2,       // \p{N}
  kPunctuation = 4,  // \p{P}
  kMark = 8,         // \p{M}
  kSymbol = 16,      // \p{S}
};

struct UnicodeRange {
  std::uint32_t first, last;
  std::uint8_t flags;
};
extern const UnicodeRange kUnicodeRanges[];  // unicode_tables.cpp (generated)
extern const std::size_t kUnicodeRangeCount;

std::uint8_t unicode_flags(std::uint32_t cp);
bool unicode_is_whitespace(std::uint32_t cp);  // the White_Space property (what regex \s means)
std::uint32_t unicode_ascii_lower(std::uint32_t cp);

// Decodes `text`; `offsets` (when not null) receives each code point's byte offset.
std::vector<std::uint32_t> utf8_decode(std::string_view text, std::vector<std::size_t>* offsets = nullptr);
void utf8_append(std::string& out, std::uint32_t cp);
// Byte length of the UTF-8 sequence starting with `lead` (1 for invalid lead bytes).
std::size_t utf8_length(unsigned char lead);

}  // namespace cpudl::llm
