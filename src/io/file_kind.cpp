// File kinds by their magic bytes (file_kind.h).
#include "io/file_kind.h"

#include <cstring>
#include <fstream>

namespace cpudl::io {

FileKind file_kind(std::string_view head, std::uint64_t file_size) {
  const auto starts = [&](std::string_view magic) { return head.substr(0, magic.size()) == magic; };
  if (starts("GGUF")) return FileKind::gguf;
  if (starts("\x93NUMPY")) return FileKind::npy;
  if (starts("\x89PNG\r\n\x1a\n")) return FileKind::png;
  if (starts("\xff\xd8\xff")) return FileKind::jpeg;
  if ((starts("P5") || starts("P2")) && head.size() > 2 && std::strchr(" \t\r\n", head[2]))
    return FileKind::pgm;
  // safetensors: the JSON header's length (little-endian u64) that fits the file, then '{'
  if (head.size() > 8 && head[8] == '{') {
    std::uint64_t header = 0;
    for (int i = 7; i >= 0; --i)
      header = (header << 8) | static_cast<unsigned char>(head[static_cast<std::size_t>(i)]);
    if (header >= 2 && header <= file_size - 8) return FileKind::safetensors;
  }
  // ONNX: a ModelProto whose first field is ir_version (field 1, varint: tag 0x08), 1 to 15 so far;
  // every exporter writes it first.
  if (head.size() >= 2 && head[0] == '\x08' && head[1] >= 1 && head[1] <= 15) return FileKind::onnx;
  return FileKind::unknown;
}

FileKind file_kind(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return FileKind::unknown;
  char head[16] = {};
  in.read(head, sizeof head);
  return file_kind(std::string_view(head, static_cast<std::size_t>(in.gcount())), size);
}

std::string file_kind_description(FileKind kind) {
  switch (kind) {
    case FileKind::onnx:
      return "an ONNX model (cpudl run, info, detect, quantize and serve take it)";
    case FileKind::gguf:
      return "a GGUF language model (cpudl generate, chat, bench llm, info, quantize and serve take it)";
    case FileKind::safetensors:
      return "a safetensors file (a model cpudl train wrote: cpudl eval, predict and serve take it)";
    case FileKind::npy:
      return "a NumPy .npy array (an input for cpudl run --input)";
    case FileKind::png:
      return "a PNG image (an input for cpudl predict and detect)";
    case FileKind::pgm:
      return "a PGM image (an input for cpudl predict)";
    case FileKind::jpeg:
      return "a JPEG image";
    case FileKind::unknown:
      break;
  }
  return {};
}

}  // namespace cpudl::io
