// PGM, PNG and JPEG decoding (image_decode.h). PGM is a page of parsing; PNG and JPEG come in
// every variant people save (palette, 16-bit, interlaced; progressive, CMYK), which libpng and
// libjpeg-turbo decode and a hand-written decoder would not.
#include "data/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>

#include "cpudl/error.h"

namespace cpudl::data {

namespace {

DecodedImage read_pgm(const std::string& bytes, const std::string& name) {
  std::size_t pos = 2;
  auto next_int = [&]() -> long {
    while (pos < bytes.size()) {  // whitespace and # comments
      if (std::isspace(static_cast<unsigned char>(bytes[pos]))) {
        ++pos;
      } else if (bytes[pos] == '#') {
        while (pos < bytes.size() && bytes[pos] != '\n') ++pos;
      } else {
        break;
      }
    }
    long v = 0;
    std::size_t digits = 0;
    while (pos < bytes.size() && std::isdigit(static_cast<unsigned char>(bytes[pos])) && digits < 9)
      v = v * 10 + (bytes[pos++] - '0'), ++digits;
    if (digits == 0) throw Error(name + ": malformed PGM header");
    return v;
  };
  const bool binary = bytes[1] == '5';
  const long w = next_int(), h = next_int(), maxval = next_int();
  if (w < 1 || h < 1 || w > 16384 || h > 16384 || maxval < 1 || maxval > 255)
    throw Error(name + ": PGM of " + std::to_string(w) + "x" + std::to_string(h) + ", max " +
                std::to_string(maxval) + " (8-bit images up to 16384x16384 supported)");
  DecodedImage t{1, h, w, std::vector<float>(static_cast<std::size_t>(w * h))};
  if (binary) {
    ++pos;  // the single whitespace after maxval
    if (bytes.size() < pos + static_cast<std::size_t>(w * h))
      throw Error(name + ": truncated PGM pixel data");
    for (long i = 0; i < w * h; ++i)
      t.values[static_cast<std::size_t>(i)] =
          static_cast<unsigned char>(bytes[pos + static_cast<std::size_t>(i)]) / static_cast<float>(maxval);
  } else {
    for (long i = 0; i < w * h; ++i)
      t.values[static_cast<std::size_t>(i)] = static_cast<float>(next_int()) / static_cast<float>(maxval);
  }
  return t;
}

constexpr std::int64_t kMaxSide = 16384;

// Every PNG (grey, grey+alpha, RGB, RGBA, palette, 1 to 16 bits, interlaced) through libpng's
// simplified API, as 8-bit sRGB values; alpha is dropped, as PIL's convert("RGB") drops it.
DecodedImage read_png(const std::string& bytes, const std::string& name) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    throw Error(name + ": corrupt PNG (" + image.message + ")");
  const bool colour = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  // 16-bit files come out as their 16-bit values (libpng's linear formats: no gamma applied to a
  // file without gAMA, so value / 65535 as PIL and OpenCV read them; alpha composited on black);
  // 8-bit ones with their alpha, so that none is composited in, and the alpha then dropped.
  const bool sixteen = (image.format & PNG_FORMAT_FLAG_LINEAR) != 0;
  const int channels = sixteen ? (colour ? 3 : 1) : (colour ? 4 : 2);
  image.format = sixteen ? (colour ? PNG_FORMAT_LINEAR_RGB : PNG_FORMAT_LINEAR_Y)
                         : (colour ? PNG_FORMAT_RGBA : PNG_FORMAT_GA);
  if (image.width < 1 || image.height < 1 || image.width > kMaxSide || image.height > kMaxSide) {
    png_image_free(&image);
    throw Error(name + ": PNG of " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                " (at most " + std::to_string(kMaxSide) + " on a side)");
  }
  std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr))
    throw Error(name + ": corrupt PNG image data (" + image.message + ")");
  const int kept = colour ? 3 : 1;
  const std::size_t plane = static_cast<std::size_t>(image.width) * image.height;
  DecodedImage t{kept, image.height, image.width, std::vector<float>(kept * plane)};
  for (int ch = 0; ch < kept; ++ch)
    for (std::size_t i = 0; i < plane; ++i) {
      const std::size_t at = i * channels + static_cast<std::size_t>(ch);
      std::uint16_t wide = 0;
      if (sixteen) std::memcpy(&wide, pixels.data() + 2 * at, 2);
      t.values[ch * plane + i] = sixteen ? wide / 65535.0f : pixels[at] / 255.0f;
    }
  return t;
}

// JPEG (baseline and progressive, grey, YCbCr, CMYK) through TurboJPEG, into grey for grey files
// and RGB otherwise.
DecodedImage read_jpeg(const std::string& bytes, const std::string& name) {
  const tjhandle tj = tjInitDecompress();
  if (!tj) throw Error(name + ": cannot start the JPEG decoder");
  int width = 0, height = 0, subsampling = 0, colourspace = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  auto fail = [&](const std::string& what) {
    const std::string message = name + ": " + what + " (" + tjGetErrorStr2(tj) + ")";
    tjDestroy(tj);
    throw Error(message);
  };
  if (tjDecompressHeader3(tj, data, size, &width, &height, &subsampling, &colourspace) != 0)
    fail("corrupt JPEG header");
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide) {
    tjDestroy(tj);
    throw Error(name + ": JPEG of " + std::to_string(width) + "x" + std::to_string(height) + " (at most " +
                std::to_string(kMaxSide) + " on a side)");
  }
  const bool grey = colourspace == TJCS_GRAY;
  const int channels = grey ? 1 : 3;
  std::vector<unsigned char> pixels(static_cast<std::size_t>(width) * height * channels);
  // A truncated file decodes with a warning (the rest grey), as libjpeg does: refused here.
  if (tjDecompress2(tj, data, size, pixels.data(), width, 0, height, grey ? TJPF_GRAY : TJPF_RGB,
                    TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING) != 0)
    fail("corrupt or truncated JPEG data");
  tjDestroy(tj);
  const std::size_t plane = static_cast<std::size_t>(width) * height;
  DecodedImage t{channels, height, width, std::vector<float>(channels * plane)};
  for (int ch = 0; ch < channels; ++ch)
    for (std::size_t i = 0; i < plane; ++i) t.values[ch * plane + i] = pixels[i * channels + ch] / 255.0f;
  return t;
}

}  // namespace

DecodedImage decode_image_values(const std::string& bytes, const std::string& name) {
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0)
    return read_png(bytes, name);
  if (bytes.size() >= 2 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '2'))
    return read_pgm(bytes, name);
  if (bytes.size() >= 3 && std::memcmp(bytes.data(), "\xff\xd8\xff", 3) == 0) return read_jpeg(bytes, name);
  throw Error(name + ": not a PGM (P5/P2), PNG or JPEG image");
}

}  // namespace cpudl::data
