// libFuzzer target: the ONNX loader on arbitrary bytes must return a Graph or throw cpudl::Error,
// never crash, hang or read out of bounds (external data is looked up in a folder that does not
// exist, so only in-file data is read).
#include <cstddef>
#include <cstdint>
#include <string>

#include "cpudl/error.h"
#include "infer/onnx_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    cpudl::infer::parse_onnx(std::string(reinterpret_cast<const char*>(data), size), "fuzz.onnx",
                             "/nonexistent-cpudl-fuzz");
  } catch (const cpudl::Error&) {
  }
  return 0;
}
