// GGUF reading and writing: a round trip through the writer, the real vocabulary files written
// by llama.cpp's tools, and every kind of corruption the reader must name instead of crashing.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "llm/gguf/gguf.h"

namespace cpudl::llm {
namespace {

GgufValue string_value(std::string_view s) {
  GgufValue v;
  v.type = GgufValueType::string;
  v.str = s;
  return v;
}
GgufValue int_value(GgufValueType type, std::int64_t i) {
  GgufValue v;
  v.type = type;
  v.i = i;
  v.f = static_cast<double>(i);
  return v;
}

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("cpudl_gguf_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < 64; ++i) floats_[i] = static_cast<float>(i) * 0.5f;
    for (int i = 0; i < 34; ++i) q8_[i] = static_cast<std::uint8_t>(i);
    GgufValue scores;
    scores.type = GgufValueType::array;
    scores.array_type = GgufValueType::f32;
    scores.numbers = {0.5, -1.0};
    write_gguf(
        path(),
        {{"general.architecture", string_value("llama")},
         {"llama.block_count", int_value(GgufValueType::u32, 3)},
         {"test.scores", scores},
         {"test.flag", int_value(GgufValueType::boolean, 1)}},
        {{"a", GgmlType::f32, {16, 4}, {reinterpret_cast<const std::uint8_t*>(floats_), sizeof floats_}},
         {"b", GgmlType::q8_0, {32}, {q8_, sizeof q8_}}});
    bytes_ = io::read_file(path());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path path() const { return dir_ / "t.gguf"; }

  std::string parse_error(const std::string& bytes) {
    try {
      GgufFile::parse({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, "t.gguf");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
  float floats_[64];
  std::uint8_t q8_[34];
  std::string bytes_;
};

TEST_F(GgufTest, RoundTripsMetadataAndTensorsInPlace) {
  const GgufFile f = GgufFile::open(path());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 3);
  EXPECT_EQ(f.get_int("missing.key", 7), 7);
  EXPECT_TRUE(f.get_bool("test.flag", false));
  EXPECT_EQ(f.get_numbers("test.scores"), (std::vector<double>{0.5, -1.0}));
  const GgufTensor& a = f.tensor("a");
  EXPECT_EQ(a.dims, (std::vector<std::uint64_t>{16, 4}));
  EXPECT_EQ(a.bytes, sizeof floats_);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data) % 32, 0u);
  EXPECT_EQ(std::memcmp(a.data, floats_, sizeof floats_), 0);
  const GgufTensor& b = f.tensor("b");
  EXPECT_EQ(b.type, GgmlType::q8_0);
  EXPECT_EQ(b.bytes, 34u);
  EXPECT_EQ(std::memcmp(b.data, q8_, 34), 0);
  EXPECT_THROW(f.tensor("c"), Error);
  EXPECT_THROW(f.get_string("llama.block_count"), Error);  // wrong type
}

TEST_F(GgufTest, ReadsFilesWrittenByLlamaCppTools) {
  const GgufFile f = GgufFile::open(std::filesystem::path(CPUDL_LLM_VOCAB_DIR) / "ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), 32000u);
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens")[1], "<s>");
  EXPECT_EQ(f.get_int("llama.context_length"), 4096);
}

TEST_F(GgufTest, EveryTruncationIsANamedErrorNeverACrash) {
  // The padding after the last tensor may go; nothing before its end may.
  const auto* base = reinterpret_cast<const std::uint8_t*>(bytes_.data());
  const GgufFile whole = GgufFile::parse({base, bytes_.size()}, "t.gguf");
  const auto& last = whole.tensor("b");
  const std::size_t end = static_cast<std::size_t>(last.data - base) + last.bytes;
  EXPECT_LT(end, bytes_.size());
  for (std::size_t n = 0; n < end; ++n) {
    const std::string err = parse_error(bytes_.substr(0, n));
    EXPECT_NE(err.find("t.gguf: "), std::string::npos) << "truncated to " << n << " bytes: " << err;
  }
  EXPECT_EQ(parse_error(bytes_.substr(0, end)), "");
}

TEST_F(GgufTest, CorruptHeaderFieldsAreNamed) {
  std::string bad = bytes_;
  bad[0] = 'X';
  EXPECT_NE(parse_error(bad).find("not a GGUF file"), std::string::npos);
  bad = bytes_;
  bad[4] = 1;  // version 1
  EXPECT_NE(parse_error(bad).find("version 1 is not supported"), std::string::npos);
  // A tensor count far beyond the file.
  bad = bytes_;
  const std::uint64_t huge = std::uint64_t{1} << 40;
  std::memcpy(bad.data() + 8, &huge, 8);
  EXPECT_NE(parse_error(bad).find("tensor count"), std::string::npos);
  // Tensor "b" claims an unknown type.
  bad = bytes_;
  const std::size_t b_name = bad.find(std::string("\x01\0\0\0\0\0\0\0b", 9));
  ASSERT_NE(b_name, std::string::npos);
  const std::size_t b_type = b_name + 9 + 4 + 8;
  const std::uint32_t unknown = 99;
  std::memcpy(bad.data() + b_type, &unknown, 4);
  EXPECT_NE(parse_error(bad).find("tensor 'b': unknown tensor type 99"), std::string::npos)
      << parse_error(bad);
  // Tensor "b" moved onto tensor "a".
  bad = bytes_;
  const std::uint64_t zero = 0;
  std::memcpy(bad.data() + b_type + 4, &zero, 8);
  EXPECT_NE(parse_error(bad).find("overlaps"), std::string::npos) << parse_error(bad);
  // Tensor "b" at an unaligned offset.
  bad = bytes_;
  const std::uint64_t odd = 257;
  std::memcpy(bad.data() + b_type + 4, &odd, 8);
  EXPECT_NE(parse_error(bad).find("not a multiple of the alignment"), std::string::npos) << parse_error(bad);
  // A Q8_0 row whose length is not a multiple of the block.
  bad = bytes_;
  const std::uint64_t thirty = 30;
  std::memcpy(bad.data() + b_name + 9 + 4, &thirty, 8);
  EXPECT_NE(parse_error(bad).find("not a multiple of the Q8_0 block size 32"), std::string::npos)
      << parse_error(bad);
}

TEST_F(GgufTest, WriterRefusesDataThatDisagreesWithTheShape) {
  float x[3] = {};
  EXPECT_THROW(write_gguf(dir_ / "bad.gguf", {},
                          {{"x", GgmlType::f32, {4}, {reinterpret_cast<const std::uint8_t*>(x), sizeof x}}}),
               Error);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "bad.gguf"));
}

}  // namespace
}  // namespace cpudl::llm
