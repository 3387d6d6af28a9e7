// The file formats of src/io/: safetensors (round trips, corrupt files, atomic writes) and NumPy's
// .npy (round trips against NumPy's header, bad files named).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "cpudl/nn.h"
#include "named_tensors.h"

namespace cpudl {
namespace {

using testing::names;

class Safetensors : public ::testing::Test {
 protected:
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("cpudl_st_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
};

TEST_F(Safetensors, RoundTripKeepsNamesOrderDtypesAndMetadata) {
  const std::vector<std::int32_t> labels = {1, 2, 3};
  const nn::NamedTensors tensors = {{"b.weight", Tensor::arange(0, 6).reshape({2, 3})},
                                    {"a.labels", Tensor::from_buffer(labels.data(), {3}, DType::i32)},
                                    {"scalar", Tensor::scalar(4.5f)}};
  io::save_safetensors(dir / "m.safetensors", tensors, {{"architecture", "lenet5"}});
  const io::SafetensorsFile f = io::load_safetensors(dir / "m.safetensors");
  ASSERT_EQ(names(f.tensors), (std::vector<std::string>{"b.weight", "a.labels", "scalar"}));
  EXPECT_EQ(f.tensors[0].second.to_vector(), tensors[0].second.to_vector());
  EXPECT_EQ(f.tensors[1].second.dtype(), DType::i32);
  EXPECT_EQ(f.tensors[1].second.data_as<std::int32_t>()[2], 3);
  EXPECT_EQ(f.tensors[2].second.dim(), 0);
  EXPECT_EQ(f.metadata.at("architecture"), "lenet5");
  // The header is padded so the data section starts 8-byte aligned.
  std::ifstream in(dir / "m.safetensors", std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

std::string header_file(const std::string& json, std::size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + std::string(data_bytes, '\0');
}

TEST_F(Safetensors, CorruptFilesGiveOneClearError) {
  const struct {
    std::string bytes, expected;
  } cases[] = {
      {"abc", "shorter than the 8-byte header length"},
      {header_file("{}", 0).substr(0, 9), "exceeds the file"},
      {header_file("{not json", 0), "header is not valid JSON"},
      {header_file(R"({"w":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", 2), "unsupported dtype F16"},
      {header_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
       "outside the 4-byte data section"},
      {header_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "8 bytes of data for shape [3]"},
      {header_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "non-integer or negative"},
      {header_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           8),
       "overlap"},
      {header_file(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
       "expected an object with dtype, shape and data_offsets"},
  };
  for (const auto& c : cases) {
    try {
      io::parse_safetensors(c.bytes, "model.safetensors");
      ADD_FAILURE() << "accepted a corrupt file expecting: " << c.expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("model.safetensors: ", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(io::load_safetensors(dir / "missing.safetensors"), Error);
}

TEST_F(Safetensors, FailedWriteLeavesThePreviousFileIntact) {
  const auto path = dir / "keep.safetensors";
  io::save_safetensors(path, {{"w", Tensor::ones({2})}});
  const auto before = std::filesystem::file_size(path);
  EXPECT_THROW(io::save_safetensors(path, {{"w", Tensor()}}), Error);  // fails while serialising
  EXPECT_THROW(io::save_safetensors(dir / "no-such-dir" / "x.safetensors", {{"w", Tensor::ones({2})}}),
               Error);
  EXPECT_EQ(std::filesystem::file_size(path), before);
  EXPECT_EQ(io::load_safetensors(path).tensors[0].second.to_vector(), (std::vector<float>{1, 1}));
  for (const auto& entry : std::filesystem::directory_iterator(dir))  // no temporary left behind
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

TEST(Npy, RoundTripsAndMatchesNumPysHeader) {
  const Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  const std::string bytes = io::serialize_npy(t);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), std::string::npos);
  EXPECT_EQ(bytes.size() % 64, 24u);  // 64-byte header, then 24 data bytes
  const Tensor back = io::parse_npy(bytes, "t.npy");
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.to_vector(), t.to_vector());
  const Tensor ints = io::parse_npy(io::serialize_npy(Tensor::zeros({3}, DType::i64)), "i.npy");
  EXPECT_EQ(ints.dtype(), DType::i64);
  EXPECT_NE(io::serialize_npy(ints).find("'shape': (3,)"), std::string::npos);
}

TEST(Npy, BadFilesAreNamed) {
  const std::string good = io::serialize_npy(Tensor::zeros({2, 2}));
  auto error = [](const std::string& bytes) {
    try {
      io::parse_npy(bytes, "x.npy");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("hello").find("x.npy: not a .npy file"), std::string::npos);
  EXPECT_NE(error(good.substr(0, good.size() - 1)).find("holds 15 data bytes, shape [2, 2] of <f4 needs 16"),
            std::string::npos);
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_NE(error(fortran).find("Fortran-order"), std::string::npos);
  std::string complex = good;
  complex.replace(complex.find("<f4"), 3, "<c8");
  EXPECT_NE(error(complex).find("element type '<c8' is not supported"), std::string::npos);
  EXPECT_NE(error(good.substr(0, 12)).find("truncated header"), std::string::npos);
}

}  // namespace
}  // namespace cpudl
