// A picture to look at: 8-bit RGB pixels, drawn on (rectangles, text in a built-in 5x7 font) and
// written as PNG (libpng, as image_decode.cpp reads it); plus the letterbox geometry detectors
// use. What `cpudl detect --draw` writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image_decode.h"

namespace cpudl::data {

struct Picture {
  std::int64_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // height x width x 3

  // From decoded values in [0, 1] (grey is repeated into the three channels).
  static Picture from_image(const DecodedImage& image);
  void fill_rect(std::int64_t x1, std::int64_t y1, std::int64_t x2, std::int64_t y2,
                 const std::uint8_t color[3]);
  // A rectangle's outline `thickness` pixels wide, inside [x1, x2] x [y1, y2] (clipped to the picture).
  void outline(std::int64_t x1, std::int64_t y1, std::int64_t x2, std::int64_t y2, int thickness,
               const std::uint8_t color[3]);
  // Text from (x, y) at its top left, each character 6 x 8 pixels times `scale` (letters shown as
  // capitals; characters without a glyph as a box).
  void text(std::int64_t x, std::int64_t y, const std::string& s, int scale, const std::uint8_t color[3]);
  std::string png() const;  // the encoded file
};

// Pixels of `text` at `scale`: its width and height.
std::int64_t text_width(const std::string& text, int scale);
inline std::int64_t text_height(int scale) { return 8 * scale; }

// YOLOv5's letterbox: the image scaled by one factor to fit `width` x `height`, centred, the rest
// grey (114/255); with `stretch`, scaled to fill it (torchvision's detectors at a fixed export
// size, which resize and normalise inside). `values` returns [3][height][width] in [0, 1]; gains
// and pads map a box back: image x = (x - pad_x) / gain_x.
struct Letterbox {
  std::vector<float> values;
  float gain_x = 1, gain_y = 1, pad_x = 0, pad_y = 0;
};
Letterbox letterbox(const DecodedImage& image, std::int64_t width, std::int64_t height, bool stretch = false);

}  // namespace cpudl::data
