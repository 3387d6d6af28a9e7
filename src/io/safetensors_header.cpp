// Header validation for safetensors: 8-byte little-endian length, JSON object mapping names to
// {dtype, shape, data_offsets}, optional "__metadata__" of strings; ranges inside the data,
// sized for their shape, not overlapping.
#include "io/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "cpudl/error.h"
#include "io/file_kind.h"

namespace cpudl::io {

namespace {
constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit
const std::pair<const char*, DType> kDtypes[] = {{"F32", DType::f32}, {"BF16", DType::bf16},
                                                 {"I8", DType::i8},   {"I32", DType::i32},
                                                 {"I64", DType::i64}, {"U8", DType::u8}};
}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view bytes, const std::string& name) {
  auto fail = [&](const std::string& why) { throw Error(name + ": " + why); };
  if (bytes.size() < 8)
    fail("not a safetensors file (" + std::to_string(bytes.size()) +
         " bytes, shorter than the 8-byte header length)");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8) {
    if (const FileKind kind = file_kind(bytes.substr(0, 16), bytes.size()); kind != FileKind::unknown)
      fail(file_kind_description(kind) + ", not a safetensors file");
    fail("header length " + std::to_string(header_len) + " exceeds the file (" +
         std::to_string(bytes.size()) + " bytes): truncated or not safetensors");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, static_cast<std::size_t>(header_len)));
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail("header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + static_cast<std::size_t>(header_len);
  const std::uint64_t data_size = bytes.size() - out.data_start;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail("__metadata__ is not an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail("__metadata__." + mk + " is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + key + "'";
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets"))
      fail(where + ": expected an object with dtype, shape and data_offsets");
    const auto& jd = value["dtype"];
    if (!jd.is_string()) fail(where + ": dtype is not a string");
    std::optional<DType> dtype;
    for (const auto& [code, d] : kDtypes)
      if (jd.get<std::string>() == code) dtype = d;
    if (!dtype)
      fail(where + ": unsupported dtype " + jd.get<std::string>() + " (supported: F32, BF16, I8, I32, I64)");
    const auto& js = value["shape"];
    if (!js.is_array()) fail(where + ": shape is not an array");
    Shape shape;
    std::uint64_t numel = 1;
    for (const auto& d : js) {
      if (!d.is_number_unsigned()) fail(where + ": shape has a non-integer or negative entry");
      const std::uint64_t v = d.get<std::uint64_t>();
      if (v > (std::uint64_t{1} << 40) || (v && numel > (std::uint64_t{1} << 42) / v))
        fail(where + ": shape too large");
      numel *= v;
      shape.push_back(static_cast<std::int64_t>(v));
    }
    const auto& jo = value["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      fail(where + ": data_offsets must be two non-negative integers");
    const std::uint64_t begin = jo[0].get<std::uint64_t>(), end = jo[1].get<std::uint64_t>();
    if (begin > end || end > data_size)
      fail(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") outside the " + std::to_string(data_size) + "-byte data section (truncated file?)");
    if (end - begin != numel * dtype_size(*dtype))
      fail(where + ": " + std::to_string(end - begin) + " bytes of data for shape " + shape_text(shape) +
           " of " + jd.get<std::string>() + " (expected " + std::to_string(numel * dtype_size(*dtype)) + ")");
    out.entries.push_back({key, *dtype, shape, begin, end});
  }
  std::stable_sort(out.entries.begin(), out.entries.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < out.entries.size(); ++i)
    if (out.entries[i].begin < out.entries[i - 1].end)
      fail("tensors '" + out.entries[i - 1].name + "' and '" + out.entries[i].name + "' overlap");
  return out;
}

}  // namespace cpudl::io
