// libFuzzer target: the safetensors header parser must accept or reject any bytes with a
// cpudl::Error, and every accepted tensor must lie inside the file with the size its shape says.
#include <cstdint>
#include <string_view>

#include "cpudl/error.h"
#include "io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    const auto header = cpudl::io::parse_safetensors_header(bytes, "fuzz.safetensors");
    for (const auto& e : header.entries) {
      const std::uint64_t n = static_cast<std::uint64_t>(cpudl::shape_numel(e.shape));
      if (header.data_start + e.end > size || e.end - e.begin != n * cpudl::dtype_size(e.dtype))
        __builtin_trap();
    }
  } catch (const cpudl::Error&) {
  }
  return 0;
}
