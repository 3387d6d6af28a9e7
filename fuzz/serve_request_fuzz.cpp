// libFuzzer target: what `cpudl serve` parses from the network -- KServe v2 JSON tensor requests,
// with or without binary tensor data, and image bodies -- must be accepted or refused with an
// error, never crash. The first byte picks the parser (and, for binary requests, where the JSON
// part ends); accepted tensors must match the declared shape.
#include <cstdint>
#include <string>
#include <string_view>

#include "cpudl/error.h"
#include "data/image_decode.h"
#include "serve/tensor_json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      const std::vector<cpudl::serve::TensorSpec> inputs = {{"x", cpudl::DType::f32, {-1, 2, 3}},
                                                            {"ids", cpudl::DType::i64, {-1, 4}}};
      // Even first bytes below 128: the whole body is JSON. From 128: the next two bytes are the
      // Inference-Header-Content-Length (little-endian, past the body's end included), then the body.
      std::size_t header = cpudl::serve::kNoBinary;
      std::string_view request = body;
      if (data[0] >= 128) {
        if (body.size() < 2) return 0;
        header = static_cast<std::uint8_t>(body[0]) |
                 static_cast<std::size_t>(static_cast<std::uint8_t>(body[1])) << 8;
        request.remove_prefix(2);
      }
      const auto t = cpudl::serve::parse_infer_request(request, header, inputs).inputs;
      // An accepted request fits the declared inputs, with one value per element.
      if (t.size() != 2 || t[0].shape.size() != 3 || t[0].shape[1] != 2 || t[0].shape[2] != 3 ||
          t[1].shape.size() != 2 || t[1].shape[1] != 4 || t[0].shape[0] != t[1].shape[0] ||
          t[0].elements() != static_cast<std::size_t>(t[0].shape[0] * 6) ||
          t[1].elements() != static_cast<std::size_t>(t[1].shape[0] * 4))
        __builtin_trap();
    } else {
      const auto image = cpudl::data::decode_image_values(body, "body");
      if (image.values.size() != static_cast<std::size_t>(image.channels * image.height * image.width))
        __builtin_trap();
    }
  } catch (const cpudl::serve::RequestError&) {
  } catch (const cpudl::Error&) {
  }
  return 0;
}
