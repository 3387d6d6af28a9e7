// File formats cpudl reads and writes. safetensors (Hugging Face's format, which PyTorch users
// save with safetensors.torch.save_file) holds state dicts and model files.
#pragma once

#include <filesystem>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "cpudl/nn.h"

namespace cpudl::io {

struct SafetensorsFile {
  nn::NamedTensors tensors;                     // in file order
  std::map<std::string, std::string> metadata;  // the "__metadata__" string map
};

// Reads and validates the whole file: header size, JSON, dtypes (F32, BF16, I8, I32, I64),
// shapes, and that every tensor's byte range lies inside the data section, matches its shape and
// overlaps no other. Errors name the file and the tensor or field.
SafetensorsFile load_safetensors(const std::filesystem::path& path);
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& name_for_errors);

// Writes atomically: a temporary file in the same directory, fsync, then rename over `path`, so
// a failure never leaves a half-written file and never touches an existing one.
void save_safetensors(const std::filesystem::path& path, const nn::NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
std::string serialize_safetensors(const nn::NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata);

// NumPy's .npy format (versions 1.0 to 3.0): little-endian float32 ('<f4'), int64, int32, int8,
// uint8 and bool ('|b1', read as i8 0/1), C order. Errors name the file and the header field.
Tensor load_npy(const std::filesystem::path& path);
Tensor parse_npy(const std::string& bytes, const std::string& name_for_errors);
void save_npy(const std::filesystem::path& path, const Tensor& tensor);  // atomically
std::string serialize_npy(const Tensor& tensor);

// The whole file as bytes; Error naming the file when it cannot be opened or read.
std::string read_file(const std::filesystem::path& path);

// Atomically replaces `path` with `contents` (temporary file, fsync, rename, fsync of the directory).
void write_file_atomically(const std::filesystem::path& path, const std::string& contents);
// The same, writing `pieces` one after another (large files written without joining them first).
void write_file_atomically(const std::filesystem::path& path, std::span<const std::string_view> pieces);

// Before any work: UsageError when `output` is the same file as one of `inputs` (same device and
// inode, so another spelling, a link or ./ does not hide it; inputs that do not exist are
// skipped). The atomic rename would otherwise replace that input with the result. `flag` names the
// output in the message ("--out").
void require_output_is_not_an_input(const std::filesystem::path& output,
                                    std::initializer_list<std::filesystem::path> inputs, const char* flag);

}  // namespace cpudl::io
