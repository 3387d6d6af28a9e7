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

namespace cpudl::io {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

const std::pair<const char*, DType> kDtypes[] = {
    {"F32", DType::f32}, {"BF16", DType::bf16}, {"I8", DType::i8}, {"I32", DType::i32}, {"I64", DType::i64}};

std::string dtype_code(DType dtype) {
  for (const auto& [code, d] : kDtypes)
    if (d == dtype) return code;
  throw Error("safetensors: no code for dtype " + std::string(dtype_name(dtype)));
}

}  // namespace

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& name) {
  auto fail = [&](const std::string& why) -> void { throw Error(name + ": " + why); };
  if (bytes.size() < 8) fail("not a safetensors file (" + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length)");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8)
    fail("header length " + std::to_string(header_len) + " exceeds the file (" + std::to_string(bytes.size()) + " bytes): truncated or not safetensors");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail("header is not a JSON object");
  const std::size_t data_start = 8 + static_cast<std::size_t>(header_len);
  const std::uint64_t data_size = bytes.size() - data_start;

  SafetensorsFile file;
  struct Range {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("__metadata__ is not an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail("__metadata__." + mk + " is not a string");
        file.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + key + "'";
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets"))
      fail(where + ": expected an object with dtype, shape and data_offsets");
    const auto& jd = value["dtype"];
    if (!jd.is_string()) fail(where + ": dtype is not a string");
    std::optional<DType> dtype;
    for (const auto& [code, d] : kDtypes)
      if (jd.get<std::string>() == code) dtype = d;
    if (!dtype) fail(where + ": unsupported dtype " + jd.get<std::string>() + " (supported: F32, BF16, I8, I32, I64)");
    const auto& js = value["shape"];
    if (!js.is_array()) fail(where + ": shape is not an array");
    Shape shape;
    std::uint64_t numel = 1;
    for (const auto& d : js) {
      if (!d.is_number_unsigned()) fail(where + ": shape has a non-integer or negative entry");
      const std::uint64_t v = d.get<std::uint64_t>();
      if (v > (std::uint64_t{1} << 40) || (v && numel > (std::uint64_t{1} << 42) / v)) fail(where + ": shape too large");
      numel *= v;
      shape.push_back(static_cast<std::int64_t>(v));
    }
    const auto& jo = value["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      fail(where + ": data_offsets must be two non-negative integers");
    const std::uint64_t begin = jo[0].get<std::uint64_t>(), end = jo[1].get<std::uint64_t>();
    if (begin > end || end > data_size)
      fail(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside the " +
           std::to_string(data_size) + "-byte data section (truncated file?)");
    if (end - begin != numel * dtype_size(*dtype))
      fail(where + ": " + std::to_string(end - begin) + " bytes of data for shape " + shape_text(shape) + " of " +
           jd.get<std::string>() + " (expected " + std::to_string(numel * dtype_size(*dtype)) + ")");
    ranges.push_back({begin, end, key});
    file.tensors.emplace_back(key, Tensor::from_buffer(bytes.data() + data_start + begin, shape, *dtype));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end) fail("tensors '" + ranges[i - 1].name + "' and '" + ranges[i].name + "' overlap");
  // File order = data order, which is how writers lay tensors out.
  std::stable_sort(file.tensors.begin(), file.tensors.end(), [&](const auto& a, const auto& b) {
    auto at = [&](const std::string& n) {
      return std::find_if(ranges.begin(), ranges.end(), [&](const Range& r) { return r.name == n; })->begin;
    };
    return at(a.first) < at(b.first);
  });
  return file;
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path.string() + ": read error");
  return parse_safetensors(buffer.str(), path.string());
}

std::string serialize_safetensors(const nn::NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::vector<Tensor> contiguous;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error("safetensors: tensor '" + name + "' is undefined");
    if (header.contains(name)) throw Error("safetensors: tensor name '" + name + "' appears twice");
    const Tensor c = t.contiguous();
    const std::uint64_t bytes = static_cast<std::uint64_t>(c.numel()) * dtype_size(c.dtype());
    header[name] = {{"dtype", dtype_code(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(c);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  out += json;
  for (const Tensor& c : contiguous)
    out.append(static_cast<const char*>(c.raw_data()), static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype()));
  return out;
}

void save_safetensors(const std::filesystem::path& path, const nn::NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, serialize_safetensors(tensors, metadata));
}

}  // namespace cpudl::io
