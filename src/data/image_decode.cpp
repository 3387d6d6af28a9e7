// PGM and PNG decoding (image_decode.h). PNG is written here on zlib (a page of code: chunks,
// inflate, the five row filters) rather than pulling in libpng for 8-bit images.
#include "data/image_decode.h"

#include <zlib.h>

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

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

DecodedImage read_png(const std::string& bytes, const std::string& name) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t pos = 8;
  std::uint32_t width = 0, height = 0;
  int channels = 0;
  std::string idat;
  bool header = false, end = false;
  while (!end) {
    if (pos + 12 > bytes.size()) throw Error(name + ": truncated PNG (no IEND chunk)");
    const std::uint32_t len = be32(b + pos);
    const std::string type(bytes.data() + pos + 4, 4);
    if (len > bytes.size() - pos - 12) throw Error(name + ": truncated PNG chunk " + type);
    const unsigned char* data = b + pos + 8;
    if (type == "IHDR") {
      if (len != 13) throw Error(name + ": malformed IHDR");
      width = be32(data), height = be32(data + 4);
      const int depth = data[8], color = data[9], interlace = data[12];
      channels = color == 0 ? 1 : color == 2 ? 3 : color == 4 ? 2 : color == 6 ? 4 : 0;
      if (depth != 8 || channels == 0 || interlace != 0)
        throw Error(name + ": PNG with bit depth " + std::to_string(depth) + ", colour type " +
                    std::to_string(color) + ", interlace " + std::to_string(interlace) +
                    " (supported: 8-bit grey, grey+alpha, RGB, RGBA, not interlaced)");
      if (width < 1 || height < 1 || width > 16384 || height > 16384)
        throw Error(name + ": PNG of " + std::to_string(width) + "x" + std::to_string(height));
      header = true;
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(data), len);
    } else if (type == "IEND") {
      end = true;
    }
    pos += 12 + len;
  }
  if (!header) throw Error(name + ": PNG without IHDR");
  const std::size_t stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  std::vector<unsigned char> raw((stride + 1) * height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size())
    throw Error(name + ": corrupt PNG image data");
  std::vector<unsigned char> pixels(stride * height), prev(stride, 0);
  const std::size_t bpp = static_cast<std::size_t>(channels);
  for (std::uint32_t y = 0; y < height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* in = &raw[y * (stride + 1) + 1];
    unsigned char* out = &pixels[y * stride];
    for (std::size_t x = 0; x < stride; ++x) {
      const int a = x >= bpp ? out[x - bpp] : 0, up = prev[x], c = x >= bpp ? prev[x - bpp] : 0;
      int v = in[x];
      switch (filter) {
        case 0:
          break;
        case 1:
          v += a;
          break;
        case 2:
          v += up;
          break;
        case 3:
          v += (a + up) / 2;
          break;
        case 4: {
          const int p = a + up - c, pa = std::abs(p - a), pb = std::abs(p - up), pc = std::abs(p - c);
          v += (pa <= pb && pa <= pc) ? a : (pb <= pc ? up : c);
          break;
        }
        default:
          throw Error(name + ": unknown PNG row filter " + std::to_string(filter));
      }
      out[x] = static_cast<unsigned char>(v);
    }
    std::memcpy(prev.data(), out, stride);
  }
  const int colour = channels >= 3 ? 3 : 1;  // alpha dropped
  DecodedImage t{colour, static_cast<std::int64_t>(height), static_cast<std::int64_t>(width),
                 std::vector<float>(static_cast<std::size_t>(colour) * width * height)};
  for (int ch = 0; ch < colour; ++ch)
    for (std::size_t i = 0; i < static_cast<std::size_t>(width) * height; ++i)
      t.values[static_cast<std::size_t>(ch) * width * height + i] =
          pixels[i * bpp + static_cast<std::size_t>(ch)] / 255.0f;
  return t;
}

}  // namespace

DecodedImage decode_image_values(const std::string& bytes, const std::string& name) {
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0)
    return read_png(bytes, name);
  if (bytes.size() >= 2 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '2'))
    return read_pgm(bytes, name);
  throw Error(name + ": not a PGM (P5/P2) or PNG image");
}

}  // namespace cpudl::data
