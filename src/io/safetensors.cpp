// safetensors: 8-byte little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets: [begin, end)} relative to the data section, then the data.
// Written by hand on nlohmann-json: the format is a page long, and the reference library is Rust.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "io/safetensors_header.h"

namespace cpudl::io {

namespace {

const std::pair<const char*, DType> kDtypes[] = {{"F32", DType::f32}, {"BF16", DType::bf16},
                                                 {"I8", DType::i8},   {"I32", DType::i32},
                                                 {"I64", DType::i64}, {"U8", DType::u8}};

std::string dtype_code(DType dtype) {
  for (const auto& [code, d] : kDtypes)
    if (d == dtype) return code;
  throw Error("safetensors: no code for dtype " + std::string(dtype_name(dtype)));
}

}  // namespace

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& name) {
  const SafetensorsHeader header = parse_safetensors_header(bytes, name);
  SafetensorsFile file;
  file.metadata = header.metadata;
  for (const SafetensorsEntry& e : header.entries)
    file.tensors.emplace_back(
        e.name, Tensor::from_buffer(bytes.data() + header.data_start + e.begin, e.shape, e.dtype));
  return file;
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(read_file(path), path.string());
}

std::string serialize_safetensors(const nn::NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::vector<Tensor> contiguous;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error("safetensors: tensor '" + name + "' is undefined");
    if (header.contains(name)) throw Error("safetensors: tensor name '" + name + "' appears twice");
    const Tensor c = t.contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(c.numel()) * dtype_size(c.dtype());
    header[name] = {
        {"dtype", dtype_code(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(c);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  out += json;
  for (const Tensor& c : contiguous)
    out.append(static_cast<const char*>(c.raw_data()),
               static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype()));
  return out;
}

void save_safetensors(const std::filesystem::path& path, const nn::NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata));
}

}  // namespace cpudl::io
