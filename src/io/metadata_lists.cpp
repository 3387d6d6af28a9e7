#include "io/metadata_lists.h"

#include <cstdlib>
#include <sstream>

#include "cpudl/error.h"

namespace cpudl::io {

std::string join_floats(const std::vector<float>& values) {
  std::ostringstream s;
  s.precision(9);
  for (std::size_t i = 0; i < values.size(); ++i) s << (i ? "," : "") << values[i];
  return s.str();
}

std::vector<float> parse_floats(const std::string& text, const std::string& what) {
  std::vector<float> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (item.empty() || end == item.c_str() || *end)
      throw Error(what + " = '" + text + "' is not a list of numbers");
    out.push_back(v);
  }
  return out;
}

}  // namespace cpudl::io
