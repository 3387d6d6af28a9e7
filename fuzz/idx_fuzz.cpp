// libFuzzer target: the IDX parser must accept or reject any bytes with a cpudl::Error, never crash.
#include <cstdint>
#include <string_view>

#include "cpudl/data.h"
#include "cpudl/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto array =
        cpudl::data::parse_idx(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.idx");
    std::uint64_t count = 1;
    for (auto d : array.dims) count *= static_cast<std::uint64_t>(d);
    if (count != array.values.size()) __builtin_trap();  // accepted files must be self-consistent
  } catch (const cpudl::Error&) {
  }
  return 0;
}
