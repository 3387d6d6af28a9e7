// libFuzzer target for the GGUF reader: any byte string must parse or raise cpudl::Error, and
// every tensor the reader accepts must lie inside the input.
#include <cstdint>
#include <cstdlib>

#include "cpudl/error.h"
#include "llm/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = cpudl::llm::GgufFile::parse({data, size}, "fuzz.gguf");
    for (const auto& t : file.tensors())
      if (t.data < data || t.data + t.bytes > data + size) std::abort();
    for (const auto& [key, value] : file.metadata()) (void)value.strings.size();
  } catch (const cpudl::Error&) {
  }
  return 0;
}
