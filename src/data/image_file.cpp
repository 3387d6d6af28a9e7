// Image files as tensors for `cpudl predict` and `cpudl serve` (the decoding: image_decode.cpp).
#include <algorithm>

#include "cpudl/data.h"
#include "cpudl/io.h"
#include "data/image_decode.h"

namespace cpudl::data {

Tensor decode_image(const std::string& bytes, const std::string& name) {
  const DecodedImage image = decode_image_values(bytes, name);
  Tensor t = Tensor::empty({image.channels, image.height, image.width});
  std::copy(image.values.begin(), image.values.end(), t.data());
  return t;
}

Tensor read_image(const std::filesystem::path& path) {
  return decode_image(io::read_file(path), path.string());
}

}  // namespace cpudl::data
