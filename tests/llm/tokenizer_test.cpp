// Tokenizers against the reference tokenizations of real vocabularies (../shared/llm-vocab:
// test strings and the ids llama.cpp produces for them), plus decoding round trips.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "llm/chat/chat_template.h"
#include "llm/gguf/gguf.h"
#include "llm/tokenizer/split_regex.h"
#include "llm/tokenizer/tokenizer.h"
#include "llm/tokenizer/unicode.h"

namespace cpudl::llm {
namespace {

std::filesystem::path vocab_dir() { return std::filesystem::path(CPUDL_LLM_VOCAB_DIR); }

struct VocabCase {
  std::vector<std::string> inputs;
  std::vector<std::vector<std::int32_t>> expected;
};

VocabCase load_case(const std::string& name) {
  VocabCase c;
  const std::string inp = io::read_file(vocab_dir() / (name + ".inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (std::size_t start = 0;;) {
    const std::size_t end = inp.find(sep, start);
    if (end == std::string::npos) break;  // what follows the last separator is not a case
    c.inputs.push_back(inp.substr(start, end - start));
    start = end + sep.size();
  }
  std::istringstream out(io::read_file(vocab_dir() / (name + ".out")));
  for (std::string line; std::getline(out, line);) {
    std::istringstream ids(line);
    std::vector<std::int32_t> v;
    for (std::int32_t id; ids >> id;) v.push_back(id);
    c.expected.push_back(std::move(v));
  }
  return c;
}

std::string show(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (auto id : ids) s += std::to_string(id) + " ";
  return s;
}

class VocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabTest, ReproducesEveryReferenceTokenization) {
  const std::string name = std::string("ggml-vocab-") + GetParam() + ".gguf";
  const GgufFile file = GgufFile::open(vocab_dir() / name);
  const Tokenizer tok(file);
  const VocabCase c = load_case(name);
  ASSERT_EQ(c.inputs.size(), c.expected.size());
  ASSERT_GT(c.inputs.size(), 40u);
  int failures = 0;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    const auto ids = tok.encode(c.inputs[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids, c.expected[i]) << "case " << i << " '" << c.inputs[i] << "'\n got:      " << show(ids)
                                  << "\n expected: " << show(c.expected[i]);
    failures += ids != c.expected[i];
    // Decoding gives the text back (byte-level BPE exactly; SentencePiece too, as every test
    // string is valid UTF-8 and the prefix space is removed).
    if (ids == c.expected[i]) {
      EXPECT_EQ(tok.decode(ids), c.inputs[i]) << "case " << i;
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(RealVocabularies, VocabTest,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder", "falcon"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Tokenizer, AddsBosAndParsesSpecialTokensOnRequest) {
  const GgufFile file = GgufFile::open(vocab_dir() / "ggml-vocab-llama-spm.gguf");
  const Tokenizer tok(file);
  const auto with = tok.encode("Hello", true, false);
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with[0], 1);
  EXPECT_EQ(tok.encode("</s>", false, true), (std::vector<std::int32_t>{2}));
  EXPECT_NE(tok.encode("</s>", false, false), (std::vector<std::int32_t>{2}));  // plain text otherwise
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_THROW(tok.piece(32000), Error);
}

TEST(Tokenizer, ByteFallbackRoundTripsAnyBytes) {
  const GgufFile file = GgufFile::open(vocab_dir() / "ggml-vocab-llama-spm.gguf");
  const Tokenizer tok(file);
  const std::string text = "a\x01\xff b";  // a control byte and an invalid UTF-8 byte
  EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text);
  const GgufFile gpt2 = GgufFile::open(vocab_dir() / "ggml-vocab-gpt-2.gguf");
  const Tokenizer bpe(gpt2);
  EXPECT_EQ(bpe.decode(bpe.encode(text, false, false)), text);
}

// Splits against Python's `regex` module (the expected pieces below are what
// regex.findall(pattern, text) returns for Llama 3's and Qwen2's patterns).
TEST(SplitRegex, MatchesPerlSemanticsOnTheLlama3Pattern) {
  const SplitRegex llama3(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  const std::string text = "Hello WORLD'S 12345 ...\n\n  x  \t";
  std::vector<std::size_t> offsets;
  const auto cps = utf8_decode(text, &offsets);
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  llama3.split(cps, 0, cps.size(), pieces);
  std::vector<std::string> got;
  for (auto [b, e] : pieces) got.push_back(text.substr(b, e - b));
  const std::vector<std::string> expected = {"Hello", " WORLD",   "'S", " ",  "123",
                                             "45",    " ...\n\n", " ",  " x", "  \t"};
  EXPECT_EQ(got, expected);
}

TEST(ChatTemplate, RecognisesTheFamilyFromARealTemplate) {
  const GgufFile phi3 = GgufFile::open(vocab_dir() / "ggml-vocab-phi-3.gguf");
  EXPECT_EQ(detect_chat_format(phi3.get_string("tokenizer.chat_template"), true), ChatFormat::phi3);
  EXPECT_EQ(detect_chat_format("{% for m in messages %}<|im_start|>{{ m.role }}", false), ChatFormat::chatml);
  EXPECT_EQ(detect_chat_format("", true), ChatFormat::llama2);
  EXPECT_EQ(
      format_user_turn(ChatFormat::chatml, "Be brief.", "Hi", true),
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(format_user_turn(ChatFormat::llama2, "", "Hi", false), "<s>[INST] Hi [/INST]");
  EXPECT_THROW(parse_chat_format("vicuna"), UsageError);
}

TEST(SplitRegex, RejectsWhatItCannotMatch) {
  EXPECT_THROW(SplitRegex("(a)"), Error);
  EXPECT_THROW(SplitRegex("(?:ab)+"), Error);
  EXPECT_THROW(SplitRegex("\\p{Lu}"), Error);
  EXPECT_THROW(SplitRegex("a+?"), Error);
}

TEST(Tokenizer, MalformedVocabularyIsAClearError) {
  // A GGUF file whose token types disagree with its token count.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "cpudl_tokenizer_test";
  std::filesystem::create_directories(dir);
  GgufValue model;
  model.type = GgufValueType::string;
  model.str = "llama";
  GgufValue tokens;
  tokens.type = GgufValueType::array;
  tokens.array_type = GgufValueType::string;
  tokens.strings = {"<unk>", "<s>", "</s>"};
  GgufValue types;
  types.type = GgufValueType::array;
  types.array_type = GgufValueType::i32;
  types.numbers = {2, 3};
  write_gguf(dir / "bad.gguf",
             {{"tokenizer.ggml.model", model},
              {"tokenizer.ggml.tokens", tokens},
              {"tokenizer.ggml.token_type", types}},
             {});
  const GgufFile file = GgufFile::open(dir / "bad.gguf");
  try {
    Tokenizer tok(file);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.token_type has 2 entries, expected 3"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpudl::llm
