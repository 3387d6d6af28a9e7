// A whole sysfs/procfs file as text, for the runtime's readers of the machine (system_info.cpp,
// cpu_times.cpp): nullopt when it cannot be opened or read.
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace cpudl {

inline std::optional<std::string> read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return buffer.str();
}

}  // namespace cpudl
