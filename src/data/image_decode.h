// PGM (P5/P2), PNG (every colour type and bit depth, interlaced or not; alpha dropped) and JPEG
// (grey or colour) decoded from their bytes into plain values (grey: 1 channel, else RGB), with no tensor
// made: what data::read_image and data::decode_image build on, and what the request fuzz target
// (fuzz/serve_request_fuzz.cpp) reaches without the tensor library. Errors name the file (or `name`) and what
// is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cpudl::data {

struct DecodedImage {
  std::int64_t channels = 0, height = 0, width = 0;
  std::vector<float> values;  // [channels][height][width] in [0, 1]
};
DecodedImage decode_image_values(const std::string& bytes, const std::string& name);

}  // namespace cpudl::data
