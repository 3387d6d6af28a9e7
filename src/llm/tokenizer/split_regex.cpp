// A small backtracking matcher for the pre-tokenizer patterns (see split_regex.h). Quantifiers
// apply to single-code-point atoms only, so a greedy run is counted in a loop and backtracking
// walks it down: no recursion per character, whatever the input length.
#include "llm/tokenizer/split_regex.h"

#include "cpudl/error.h"
#include "llm/tokenizer/unicode.h"

namespace cpudl::llm {

namespace {

// A set of code points: ranges and category flags, optionally negated.
struct CharClass {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
  std::uint8_t flags = 0, not_flags = 0;  // \p{X} and \P{X} inside the class
  bool whitespace = false, not_whitespace = false;
  bool negated = false;
  bool matches(std::uint32_t cp) const {
    bool in = false;
    for (const auto& [a, b] : ranges) in = in || (cp >= a && cp <= b);
    if (!in && (flags | not_flags) != 0) {
      const std::uint8_t f = unicode_flags(cp);
      in = (f & flags) != 0 || (not_flags != 0 && (f & not_flags) == 0);
    }
    if (!in && whitespace) in = unicode_is_whitespace(cp);
    if (!in && not_whitespace) in = !unicode_is_whitespace(cp);
    return in != negated;
  }
};

struct Alternation;
struct Item {
  enum Kind { atom, group, negative_lookahead } kind = atom;
  CharClass cls;
  std::size_t min = 1, max = 1;
  std::shared_ptr<Alternation> inner;  // group or lookahead
};
using Sequence = std::vector<Item>;
struct Alternation {
  std::vector<Sequence> options;
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : pattern_(pattern), cps_(utf8_decode(pattern)) {}

  std::shared_ptr<Alternation> parse() {
    auto alt = parse_alternation(false);
    if (pos_ != cps_.size()) fail("unbalanced ')'");
    return alt;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error("pre-tokenizer regex '" + std::string(pattern_) + "': " + why + " at code point " +
                std::to_string(pos_));
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  std::uint32_t peek() const { return at_end() ? 0 : cps_[pos_]; }
  std::uint32_t next() {
    if (at_end()) fail("unexpected end");
    return cps_[pos_++];
  }

  std::shared_ptr<Alternation> parse_alternation(bool case_insensitive) {
    auto alt = std::make_shared<Alternation>();
    alt->options.emplace_back();
    while (!at_end() && peek() != ')') {
      if (peek() == '|') {
        ++pos_;
        alt->options.emplace_back();
        continue;
      }
      alt->options.back().push_back(parse_item(case_insensitive));
    }
    return alt;
  }

  Item parse_item(bool case_insensitive) {
    Item item;
    const std::uint32_t c = next();
    if (c == '(') {
      if (next() != '?') fail("capturing groups are not supported");
      const std::uint32_t kind = next();
      bool ci = case_insensitive;
      if (kind == '!') {
        item.kind = Item::negative_lookahead;
      } else {
        item.kind = Item::group;
        if (kind == 'i') {
          ci = true;
          if (next() != ':') fail("expected ':' after (?i");
        } else if (kind != ':') {
          fail("unsupported group kind");
        }
      }
      item.inner = parse_alternation(ci);
      if (next() != ')') fail("missing ')'");
      if (!at_end() && (peek() == '?' || peek() == '*' || peek() == '+' || peek() == '{'))
        fail("quantified groups are not supported");
      return item;
    }
    if (c == '[') {
      parse_class(item.cls, case_insensitive);
    } else if (c == '\\') {
      parse_escape(item.cls, case_insensitive);
    } else if (c == '.') {
      item.cls.negated = true;  // any code point but newline
      item.cls.ranges.push_back({'\n', '\n'});
    } else if (c == '?' || c == '*' || c == '+' || c == ')' || c == '{') {
      --pos_;
      fail("unexpected quantifier or ')'");
    } else {
      add_literal(item.cls, c, case_insensitive);
    }
    parse_quantifier(item);
    return item;
  }

  void add_literal(CharClass& cls, std::uint32_t c, bool case_insensitive) {
    cls.ranges.push_back({c, c});
    if (case_insensitive && c < 128) {
      if (c >= 'a' && c <= 'z') cls.ranges.push_back({c - 32, c - 32});
      if (c >= 'A' && c <= 'Z') cls.ranges.push_back({c + 32, c + 32});
    }
  }

  std::uint8_t parse_category() {
    if (next() != '{') fail("expected '{' after \\p");
    const std::uint32_t letter = next();
    if (next() != '}') fail("only one-letter categories are supported");
    switch (letter) {
      case 'L':
        return kLetter;
      case 'N':
        return kNumber;
      case 'P':
        return kPunctuation;
      case 'M':
        return kMark;
      case 'S':
        return kSymbol;
      default:
        fail("unsupported category");
    }
  }

  // After a backslash: a class escape or an escaped literal.
  void parse_escape(CharClass& cls, bool case_insensitive) {
    const std::uint32_t e = next();
    switch (e) {
      case 's':
        cls.whitespace = true;
        return;
      case 'S':
        cls.not_whitespace = true;
        return;
      case 'p':
        cls.flags |= parse_category();
        return;
      case 'P':
        cls.not_flags |= parse_category();
        return;
      case 'r':
        cls.ranges.push_back({'\r', '\r'});
        return;
      case 'n':
        cls.ranges.push_back({'\n', '\n'});
        return;
      case 't':
        cls.ranges.push_back({'\t', '\t'});
        return;
      case 'd':
        cls.ranges.push_back({'0', '9'});
        return;
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          fail("unsupported escape");
        add_literal(cls, e, case_insensitive);
    }
  }

  void parse_class(CharClass& cls, bool case_insensitive) {
    if (peek() == '^') {
      cls.negated = true;
      ++pos_;
    }
    bool first = true;
    while (true) {
      std::uint32_t c = next();
      if (c == ']' && !first) return;
      first = false;
      if (c == '\\') {
        const std::uint32_t e = peek();
        if (e == 's' || e == 'S' || e == 'p' || e == 'P' || e == 'd') {
          parse_escape(cls, case_insensitive);
          continue;
        }
        c = next();
        if (c == 'r')
          c = '\r';
        else if (c == 'n')
          c = '\n';
        else if (c == 't')
          c = '\t';
      }
      if (peek() == '-' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        std::uint32_t hi = next();
        if (hi == '\\') hi = next();
        if (hi < c) fail("reversed range");
        cls.ranges.push_back({c, hi});
      } else {
        add_literal(cls, c, case_insensitive);
      }
    }
  }

  std::size_t parse_number() {
    std::size_t n = 0;
    bool any = false;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      n = n * 10 + (next() - '0');
      any = true;
      if (n > 1000000) fail("repetition count too large");
    }
    if (!any) fail("expected a number");
    return n;
  }

  void parse_quantifier(Item& item) {
    if (at_end()) return;
    switch (peek()) {
      case '?':
        ++pos_;
        item.min = 0;
        item.max = 1;
        break;
      case '*':
        ++pos_;
        item.min = 0;
        item.max = SIZE_MAX;
        break;
      case '+':
        ++pos_;
        item.min = 1;
        item.max = SIZE_MAX;
        break;
      case '{':
        ++pos_;
        item.min = item.max = parse_number();
        if (peek() == ',') {
          ++pos_;
          item.max = peek() == '}' ? SIZE_MAX : parse_number();
        }
        if (next() != '}' || item.max < item.min) fail("malformed {m,n}");
        break;
      default:
        return;
    }
    if (!at_end() && (peek() == '?' || peek() == '+'))
      fail("lazy and possessive quantifiers are not supported");
  }

  std::string_view pattern_;
  std::vector<std::uint32_t> cps_;
  std::size_t pos_ = 0;
};

// What remains to match after the current sequence ends: the rest of an enclosing sequence.
struct Continuation {
  const Sequence* seq;
  std::size_t index;
  const Continuation* next;
};

struct Matcher {
  std::span<const std::uint32_t> text;
  std::size_t end;  // matches may not run past this
  std::size_t match_end = 0;

  bool alternation(const Alternation& alt, std::size_t pos, const Continuation* k) {
    for (const Sequence& seq : alt.options)
      if (sequence(seq, 0, pos, k)) return true;
    return false;
  }

  bool sequence(const Sequence& seq, std::size_t index, std::size_t pos, const Continuation* k) {
    if (index == seq.size()) {
      if (k == nullptr) {
        match_end = pos;
        return true;
      }
      return sequence(*k->seq, k->index, pos, k->next);
    }
    const Item& item = seq[index];
    if (item.kind == Item::group) {
      const Continuation rest{&seq, index + 1, k};
      return alternation(*item.inner, pos, &rest);
    }
    if (item.kind == Item::negative_lookahead) {
      Matcher probe{text, end};
      if (probe.alternation(*item.inner, pos, nullptr)) return false;
      return sequence(seq, index + 1, pos, k);
    }
    std::size_t run = 0;
    while (run < item.max && pos + run < end && item.cls.matches(text[pos + run])) ++run;
    if (run < item.min) return false;
    for (std::size_t n = run + 1; n-- > item.min;)
      if (sequence(seq, index + 1, pos + n, k)) return true;
    return false;
  }
};

}  // namespace

struct SplitRegex::Impl {
  std::shared_ptr<Alternation> root;
};

SplitRegex::SplitRegex(std::string_view pattern) : impl_(std::make_unique<Impl>()) {
  impl_->root = Parser(pattern).parse();
}
SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

std::size_t SplitRegex::match_at(std::span<const std::uint32_t> text, std::size_t pos) const {
  Matcher m{text, text.size()};
  return m.alternation(*impl_->root, pos, nullptr) ? m.match_end - pos : 0;
}

void SplitRegex::split(std::span<const std::uint32_t> text, std::size_t begin, std::size_t end,
                       std::vector<std::pair<std::size_t, std::size_t>>& pieces) const {
  Matcher m{text, end};
  std::size_t gap = begin;
  for (std::size_t pos = begin; pos < end;) {
    if (m.alternation(*impl_->root, pos, nullptr) && m.match_end > pos) {
      if (gap < pos) pieces.emplace_back(gap, pos);
      pieces.emplace_back(pos, m.match_end);
      pos = gap = m.match_end;
    } else {
      ++pos;
    }
  }
  if (gap < end) pieces.emplace_back(gap, end);
}

}  // namespace cpudl::llm
