// What a file is, told by its first bytes: the formats cpudl reads. A file handed to the wrong
// command (an ONNX model to `eval --model`, a safetensors model to `generate`) is named with the
// commands that take it, instead of failing deep in the wrong parser ("header length
// 8031177557570357256 exceeds the file").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace cpudl::io {

enum class FileKind { unknown, onnx, gguf, safetensors, npy, png, pgm, jpeg };

// `head`: the file's first bytes (16 or more when the file has them); `file_size`: its length.
FileKind file_kind(std::string_view head, std::uint64_t file_size);
// Reads the head of `path`; unknown when it cannot be read.
FileKind file_kind(const std::filesystem::path& path);
// "an ONNX model (cpudl run, info, detect, quantize and serve take it)"; empty for unknown.
std::string file_kind_description(FileKind kind);

}  // namespace cpudl::io
