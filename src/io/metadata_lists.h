// Number lists in string metadata (safetensors __metadata__, ONNX metadata_props): "0.1307,0.3081"
// as cpudl train and cpudl export write them, read back strictly (a malformed list is an error,
// never a short one).
#pragma once

#include <string>
#include <vector>

namespace cpudl::io {

// Comma-separated, at full float precision.
std::string join_floats(const std::vector<float>& values);
// Error "`what` = 'text' is not a list of numbers" on an empty item or trailing text; "" is [].
std::vector<float> parse_floats(const std::string& text, const std::string& what);

}  // namespace cpudl::io
