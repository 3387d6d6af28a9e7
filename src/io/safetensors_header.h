// The safetensors header, parsed and validated without touching tensors: what the loader and
// the fuzz target share. Every check names the file and the tensor or field at fault.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cpudl/tensor.h"

namespace cpudl::io {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;  // byte range within the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
  std::size_t data_start = 0;  // offset of the data section in the file
};

SafetensorsHeader parse_safetensors_header(std::string_view bytes, const std::string& name_for_errors);

}  // namespace cpudl::io
