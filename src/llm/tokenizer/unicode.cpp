// UTF-8 and category look-ups for the tokenizers (tables in unicode_tables.cpp).
#include "llm/tokenizer/unicode.h"

#include <algorithm>

namespace cpudl::llm {

std::uint8_t unicode_flags(std::uint32_t cp) {
  const UnicodeRange* end = kUnicodeRanges + kUnicodeRangeCount;
  const UnicodeRange* it = std::upper_bound(
      kUnicodeRanges, end, cp, [](std::uint32_t c, const UnicodeRange& r) { return c < r.first; });
  if (it == kUnicodeRanges) return 0;
  --it;
  return cp <= it->last ? it->flags : 0;
}

bool unicode_is_whitespace(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::uint32_t unicode_ascii_lower(std::uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

std::vector<std::uint32_t> utf8_decode(std::string_view text, std::vector<std::size_t>* offsets) {
  std::vector<std::uint32_t> out;
  out.reserve(text.size());
  if (offsets != nullptr) offsets->clear();
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t n = utf8_length(lead);
    std::uint32_t cp = 0xFFFD;
    if (n == 1) {
      if (lead < 0x80) cp = lead;
    } else if (i + n <= text.size()) {
      cp = lead & (0x7F >> n);
      for (std::size_t k = 1; k < n; ++k) {
        const auto c = static_cast<unsigned char>(text[i + k]);
        if ((c & 0xC0) != 0x80) {
          cp = 0xFFFD;
          n = 1;
          break;
        }
        cp = (cp << 6) | (c & 0x3F);
      }
    } else {
      n = 1;
    }
    if (offsets != nullptr) offsets->push_back(i);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace cpudl::llm
