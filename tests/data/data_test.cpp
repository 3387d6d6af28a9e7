// IDX reading (plain and gzip) and MNIST loading, including every way a file can be wrong.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cpudl/data.h"
#include "cpudl/error.h"

namespace cpudl::data {
namespace {

std::string idx_bytes(const std::vector<std::uint32_t>& dims, std::size_t values, std::uint8_t fill = 7) {
  std::string s = {0, 0, 8, static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int b = 3; b >= 0; --b) s += static_cast<char>((d >> (8 * b)) & 0xff);
  return s + std::string(values, static_cast<char>(fill));
}

class Idx : public ::testing::Test {
 protected:
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("cpudl_idx_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::filesystem::path write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return dir / name;
  }
  std::filesystem::path write_gz(const std::string& name, const std::string& bytes) {
    gzFile f = gzopen((dir / name).c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return dir / name;
  }
};

TEST_F(Idx, ReadsPlainAndGzip) {
  const auto plain = read_idx(write("a", idx_bytes({2, 3, 4}, 24)));
  EXPECT_EQ(plain.dims, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(plain.values.size(), 24u);
  const auto gz = read_idx(write_gz("a.gz", idx_bytes({5}, 5, 9)));
  EXPECT_EQ(gz.values, (std::vector<std::uint8_t>{9, 9, 9, 9, 9}));
}

TEST_F(Idx, CorruptFilesNameTheProblem) {
  const struct {
    std::string bytes, expected;
  } cases[] = {
      {"", "truncated (no 4-byte IDX magic number)"},
      {std::string("\x00\x00\x0d\x01", 4), "not an unsigned-byte IDX file"},
      {idx_bytes({3}, 2), "truncated: the header promises 3 values"},
      {idx_bytes({3}, 4), "longer than its header says"},
      {idx_bytes({0}, 0), "dimension 0 has size 0"},
      {idx_bytes({2, 2}, 0).substr(0, 9), "truncated in the dimension sizes"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const auto path = write("bad" + std::to_string(i++), c.bytes);
    try {
      read_idx(path);
      ADD_FAILURE() << "accepted: " << c.expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_idx(dir / "missing"), Error);
}

TEST_F(Idx, LoadsMnistLayoutAndChecksConsistency) {
  std::string labels = idx_bytes({3}, 0);
  labels += std::string{1, 2, 9};
  write("train-images-idx3-ubyte", idx_bytes({3, 28, 28}, 3 * 784, 255));
  write_gz("train-labels-idx1-ubyte.gz", labels);
  const Dataset ds = load_mnist(dir, true);
  EXPECT_EQ(ds.images.shape(), (Shape{3, 1, 28, 28}));
  EXPECT_FLOAT_EQ(ds.images.at({2, 0, 27, 27}), 1.0f);  // (255/255 - 0.5) / 0.5
  EXPECT_EQ(ds.labels.data_as<std::int64_t>()[2], 9);

  labels.back() = 12;
  write_gz("train-labels-idx1-ubyte.gz", labels);
  try {
    load_mnist(dir, true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 12 at index 2 is outside 0..9"), std::string::npos)
        << e.what();
  }
  write("train-images-idx3-ubyte", idx_bytes({4, 28, 28}, 4 * 784));
  EXPECT_THROW(load_mnist(dir, true), Error);  // 4 images, 3 labels
  try {
    load_mnist(dir, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-images-idx3-ubyte[.gz]: missing"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_mnist(dir / "nope", true), Error);
}

}  // namespace
}  // namespace cpudl::data

namespace cpudl::data {
namespace {

Dataset numbered(std::int64_t n) {
  Dataset d{Tensor::empty({n, 1, 4, 4}), Tensor::empty({n}, DType::i64), "test", {}, {}, 10, {}};
  for (std::int64_t i = 0; i < n; ++i) {
    for (int p = 0; p < 16; ++p) d.images.data()[i * 16 + p] = static_cast<float>(i * 100 + p);
    d.labels.data_as<std::int64_t>()[i] = i;
  }
  return d;
}

std::vector<std::vector<std::int64_t>> epoch_labels(DataLoader& loader, std::int64_t epoch,
                                                    std::int64_t skip = 0) {
  std::vector<std::vector<std::int64_t>> out;
  loader.start_epoch(epoch, skip);
  Tensor x, y;
  while (loader.next(x, y)) {
    std::vector<std::int64_t> labels(y.data_as<std::int64_t>(), y.data_as<std::int64_t>() + y.numel());
    for (std::int64_t i = 0; i < y.numel(); ++i)
      EXPECT_EQ(x.at({i, 0, 0, 0}), static_cast<float>(labels[static_cast<std::size_t>(i)] * 100));
    out.push_back(labels);
  }
  return out;
}

TEST(DataLoader, SeededOrderIndependentOfWorkersAndResumable) {
  const Dataset d = numbered(23);
  LoaderOptions o;
  o.batch = 5, o.seed = 9;
  DataLoader one(d, o);
  o.workers = 3;
  DataLoader three(d, o);
  const auto a = epoch_labels(one, 1), b = epoch_labels(three, 1);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 5u);  // 23 samples: four batches of 5 and one of 3
  EXPECT_EQ(a.back().size(), 3u);
  std::vector<std::int64_t> all;
  for (const auto& batch : a) all.insert(all.end(), batch.begin(), batch.end());
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < 23; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], i);  // a permutation
  EXPECT_NE(epoch_labels(one, 2), a);  // a new order per epoch
  const auto resumed = epoch_labels(one, 1, 2);
  EXPECT_EQ(resumed, std::vector<std::vector<std::int64_t>>(a.begin() + 2, a.end()));
  o.drop_last = true, o.shuffle = false, o.workers = 2;
  DataLoader ordered(d, o);
  const auto c = epoch_labels(ordered, 1);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0], (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(DataLoader, AugmentationCropsAndFlips) {
  const Dataset d = numbered(8);
  LoaderOptions o;
  o.batch = 8, o.shuffle = false, o.crop_padding = 1, o.horizontal_flip = true;
  DataLoader loader(d, o);
  loader.start_epoch(1);
  Tensor x, y;
  ASSERT_TRUE(loader.next(x, y));
  int changed = 0;
  for (std::int64_t i = 0; i < 8; ++i) {
    // Every output pixel is 0 (padding) or a pixel of the same sample.
    for (std::int64_t p = 0; p < 16; ++p) {
      const float v = x.data()[i * 16 + p];
      EXPECT_TRUE(v == 0.0f || (v >= static_cast<float>(i * 100) && v < static_cast<float>(i * 100 + 16)))
          << v;
    }
    changed += x.at({i, 0, 1, 1}) != static_cast<float>(i * 100 + 5);
  }
  EXPECT_GT(changed, 0);
  EXPECT_THROW(DataLoader(d, LoaderOptions{0}), Error);
}

}  // namespace
}  // namespace cpudl::data
