// Pictures (picture.h): drawing, a 5x7 font, PNG encoding by libpng, and the letterbox.
#include "data/picture.h"

#include <png.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include "cpudl/error.h"

namespace cpudl::data {
namespace {

// 5x7 glyphs, one byte per row, the leftmost pixel in bit 4: digits, capitals and the punctuation
// of labels and scores ("person 0.87", "class_12").
struct Glyph {
  char c;
  std::array<std::uint8_t, 7> rows;
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}},
    {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}},
    {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}},
    {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04}},
    {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {' ', {0, 0, 0, 0, 0, 0, 0}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},
    {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'/', {0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10}},
};
constexpr std::array<std::uint8_t, 7> kMissing = {0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F};

const std::array<std::uint8_t, 7>& glyph(char c) {
  const char upper = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont)
    if (g.c == upper) return g.rows;
  return kMissing;
}

}  // namespace

Picture Picture::from_image(const DecodedImage& image) {
  Picture p;
  p.width = image.width, p.height = image.height;
  p.rgb.resize(static_cast<std::size_t>(p.width * p.height * 3));
  const std::int64_t plane = p.width * p.height;
  for (std::int64_t i = 0; i < plane; ++i)
    for (std::int64_t c = 0; c < 3; ++c) {
      const float v = image.values[static_cast<std::size_t>((image.channels == 1 ? 0 : c) * plane + i)];
      p.rgb[static_cast<std::size_t>(i * 3 + c)] =
          static_cast<std::uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255));
    }
  return p;
}

void Picture::fill_rect(std::int64_t x1, std::int64_t y1, std::int64_t x2, std::int64_t y2,
                        const std::uint8_t color[3]) {
  x1 = std::max<std::int64_t>(x1, 0), y1 = std::max<std::int64_t>(y1, 0);
  x2 = std::min(x2, width - 1), y2 = std::min(y2, height - 1);
  for (std::int64_t y = y1; y <= y2; ++y)
    for (std::int64_t x = x1; x <= x2; ++x) std::copy(color, color + 3, rgb.begin() + (y * width + x) * 3);
}

void Picture::outline(std::int64_t x1, std::int64_t y1, std::int64_t x2, std::int64_t y2, int thickness,
                      const std::uint8_t color[3]) {
  const std::int64_t t = thickness - 1;
  fill_rect(x1, y1, x2, y1 + t, color);
  fill_rect(x1, y2 - t, x2, y2, color);
  fill_rect(x1, y1, x1 + t, y2, color);
  fill_rect(x2 - t, y1, x2, y2, color);
}

void Picture::text(std::int64_t x, std::int64_t y, const std::string& s, int scale,
                   const std::uint8_t color[3]) {
  for (const char c : s) {
    const auto& rows = glyph(c);
    for (std::int64_t r = 0; r < 7; ++r)
      for (std::int64_t b = 0; b < 5; ++b)
        if (rows[static_cast<std::size_t>(r)] & (0x10 >> b))
          fill_rect(x + b * scale, y + r * scale, x + (b + 1) * scale - 1, y + (r + 1) * scale - 1, color);
    x += 6 * scale;
  }
}

std::int64_t text_width(const std::string& text, int scale) {
  return static_cast<std::int64_t>(text.size()) * 6 * scale;
}

std::string Picture::png() const {
  if (width < 1 || height < 1 || width > 0x7FFFFFFF || height > 0x7FFFFFFF)
    throw Error("cannot encode an empty picture");
  // libpng's simplified API: the size first, then the file into a buffer of that size.
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr))
    throw Error(std::string("PNG: cannot encode the picture: ") + image.message);
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, rgb.data(), 0, nullptr))
    throw Error(std::string("PNG: cannot encode the picture: ") + image.message);
  out.resize(size);
  return out;
}

Letterbox letterbox(const DecodedImage& image, std::int64_t width, std::int64_t height, bool stretch) {
  Letterbox box;
  const float gx = static_cast<float>(width) / static_cast<float>(image.width),
              gy = static_cast<float>(height) / static_cast<float>(image.height);
  box.gain_x = box.gain_y = std::min(gx, gy);
  if (stretch) box.gain_x = gx, box.gain_y = gy;
  const auto scaled_w =
      stretch ? width
              : std::clamp<std::int64_t>(std::lround(static_cast<float>(image.width) * box.gain_x), 1, width);
  const auto scaled_h = stretch ? height
                                : std::clamp<std::int64_t>(
                                      std::lround(static_cast<float>(image.height) * box.gain_y), 1, height);
  // As YOLOv5: the padding split in two, the odd pixel to the right and bottom.
  const std::int64_t left = std::lround(static_cast<float>(width - scaled_w) / 2 - 0.1f);
  const std::int64_t top = std::lround(static_cast<float>(height - scaled_h) / 2 - 0.1f);
  box.pad_x = static_cast<float>(left), box.pad_y = static_cast<float>(top);
  box.values.assign(static_cast<std::size_t>(3 * width * height), 114.0f / 255.0f);
  // Bilinear with pixel centres aligned (OpenCV's INTER_LINEAR, which YOLOv5 resizes with).
  const float sx = static_cast<float>(image.width) / static_cast<float>(scaled_w);
  const float sy = static_cast<float>(image.height) / static_cast<float>(scaled_h);
  const std::int64_t plane = image.width * image.height;
  for (std::int64_t y = 0; y < scaled_h; ++y) {
    const float fy =
        std::clamp((static_cast<float>(y) + 0.5f) * sy - 0.5f, 0.0f, static_cast<float>(image.height - 1));
    const auto y0 = static_cast<std::int64_t>(fy);
    const std::int64_t y1 = std::min(y0 + 1, image.height - 1);
    const float wy = fy - static_cast<float>(y0);
    for (std::int64_t x = 0; x < scaled_w; ++x) {
      const float fx =
          std::clamp((static_cast<float>(x) + 0.5f) * sx - 0.5f, 0.0f, static_cast<float>(image.width - 1));
      const auto x0 = static_cast<std::int64_t>(fx);
      const std::int64_t x1 = std::min(x0 + 1, image.width - 1);
      const float wx = fx - static_cast<float>(x0);
      for (std::int64_t c = 0; c < 3; ++c) {
        const float* p = image.values.data() + (image.channels == 1 ? 0 : c) * plane;
        const float top_row = p[y0 * image.width + x0] * (1 - wx) + p[y0 * image.width + x1] * wx;
        const float bottom_row = p[y1 * image.width + x0] * (1 - wx) + p[y1 * image.width + x1] * wx;
        box.values[static_cast<std::size_t>((c * height + top + y) * width + left + x)] =
            top_row * (1 - wy) + bottom_row * wy;
      }
    }
  }
  return box;
}

}  // namespace cpudl::data
