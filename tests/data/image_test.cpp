// Images as people save them: every PNG variant and JPEG decoded as PIL decodes them, resized as
// PyTorch's antialiased bilinear interpolate does (fixtures: scripts/gen-image-fixtures.py), and
// corrupt or truncated files refused with their name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/io.h"

namespace cpudl::data {
namespace {

const std::string kImages = std::string(CPUDL_FIXTURES_DIR) + "/../golden/images/";

double max_difference(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e30;
  double d = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    d = std::max(d, static_cast<double>(std::fabs(got.data()[i] - want.data()[i])));
  return d;
}

struct Decoded {
  std::string file;
  double tolerance;  // PNG is lossless: the same 8 (or 16) bits; JPEG's IDCT may round apart
};

class ImageFile : public ::testing::TestWithParam<Decoded> {};

TEST_P(ImageFile, DecodesAsPilDoes) {
  const std::string stem = GetParam().file.substr(0, GetParam().file.find('.'));
  const Tensor got = read_image(kImages + GetParam().file);
  const Tensor want = io::load_npy(kImages + stem + ".npy");
  EXPECT_LE(max_difference(got, want), GetParam().tolerance) << GetParam().file;
}

INSTANTIATE_TEST_SUITE_P(Variants, ImageFile,
                         ::testing::Values(Decoded{"grey8.png", 1e-7}, Decoded{"rgb8.png", 1e-7},
                                           Decoded{"rgba8.png", 1e-7}, Decoded{"grey_alpha8.png", 1e-7},
                                           Decoded{"grey1.png", 1e-7}, Decoded{"palette.png", 1e-7},
                                           Decoded{"grey16.png", 1e-7}, Decoded{"grey.jpg", 1.5 / 255},
                                           Decoded{"rgb.jpg", 1.5 / 255},
                                           Decoded{"progressive.jpg", 1.5 / 255}),
                         [](const auto& info) {
                           std::string n = info.param.file;
                           for (char& c : n)
                             if (c == '.') c = '_';
                           return n;
                         });

TEST(ImageResize, MatchesPyTorchsAntialiasedBilinear) {
  const Tensor big = read_image(kImages + "big_grey.png");  // 61 x 47 -> 28 x 28: shrinks, antialiased
  EXPECT_LT(max_difference(resize_image(big, 28, 28), io::load_npy(kImages + "resize_down.npy")), 1e-5);
  const Tensor rgb = read_image(kImages + "rgb8.png");  // 11 x 13 -> 24 x 29: grows
  EXPECT_LT(max_difference(resize_image(rgb, 24, 29), io::load_npy(kImages + "resize_up.npy")), 1e-5);
  EXPECT_EQ(max_difference(resize_image(rgb, 11, 13), rgb), 0.0);  // its own size: itself
  EXPECT_THROW(resize_image(rgb, 0, 5), Error);
}

TEST(ImageFile, CorruptAndTruncatedFilesAreNamed) {
  for (const std::string file : {"rgb8.png", "rgb.jpg", "progressive.jpg"}) {
    const std::string bytes = io::read_file(kImages + file);
    for (const std::size_t keep : {bytes.size() / 2, std::size_t{40}, std::size_t{4}}) {
      try {
        decode_image(bytes.substr(0, keep), "cut." + file);
        ADD_FAILURE() << file << " cut to " << keep << " bytes decoded";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("cut." + file + ": ", 0), 0u) << e.what();
      }
    }
    std::string flipped = bytes;
    for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 24; ++i)
      flipped[i] = static_cast<char>(~flipped[i]);
    try {
      decode_image(flipped, "bad." + file);  // may decode to other pixels (JPEG) but must not crash
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("bad." + file + ": ", 0), 0u) << e.what();
    }
  }
  EXPECT_THROW(decode_image("GIF89a", "x.gif"), Error);
}

}  // namespace
}  // namespace cpudl::data
