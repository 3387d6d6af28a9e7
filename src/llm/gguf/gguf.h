// GGUF (ggml's model file format, versions 2 and 3) read in place: the file is memory-mapped and
// tensors point into the mapping, so weights are never copied to the heap and a model larger
// than free RAM runs from the page cache. Every header field is validated before it is used;
// errors name the file and the key or tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llm/gguf/ggml_types.h"

namespace cpudl::llm {

// The metadata value types of GGUF.
enum class GgufValueType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);

struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  // Scalars (the one matching `type` is set; integers also fill the other two when they fit).
  std::int64_t i = 0;
  double f = 0;
  std::string_view str;  // string values, pointing into the file
  // Arrays: element type, count, and their elements (numbers as doubles; strings as views).
  GgufValueType array_type = GgufValueType::u8;
  std::vector<double> numbers;
  std::vector<std::string_view> strings;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::f32;
  std::vector<std::uint64_t> dims;  // ne[0] first: the contiguous dimension
  std::uint64_t offset = 0;         // from the start of the data section
  std::uint64_t bytes = 0;
  const std::uint8_t* data = nullptr;
  std::uint64_t elements() const;
};

class GgufFile {
 public:
  // Maps and validates the file.
  static GgufFile open(const std::filesystem::path& path);
  // Validates bytes held by the caller (they must outlive the result): for tests and the fuzzer.
  static GgufFile parse(std::span<const std::uint8_t> bytes, const std::string& name_for_errors);

  const std::string& name() const { return name_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters: Error naming the file and key when it is missing or of another type.
  std::string_view get_string(std::string_view key) const;
  std::int64_t get_int(std::string_view key) const;  // any integer type
  std::int64_t get_int(std::string_view key, std::int64_t fallback) const;
  double get_float(std::string_view key) const;  // any numeric type
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  const std::vector<std::string_view>& get_strings(std::string_view key) const;
  const std::vector<double>& get_numbers(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  const GgufTensor& tensor(std::string_view name) const;  // Error when missing

  // Hints the kernel to read the weights ahead (generation touches all of them every token).
  void advise_will_need() const;

 private:
  std::string name_;
  std::shared_ptr<void> mapping_;  // munmap on last release
  std::span<const std::uint8_t> bytes_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

// Writes a GGUF v3 file atomically (temporary file + rename): the metadata (in the given order)
// and tensors whose data the caller provides, each padded to the alignment.
struct GgufWriterTensor {
  std::string name;
  GgmlType type;
  std::vector<std::uint64_t> dims;
  std::span<const std::uint8_t> data;
};
struct GgufWriterValue {
  std::string key;
  GgufValue value;
};
void write_gguf(const std::filesystem::path& path, const std::vector<GgufWriterValue>& metadata,
                const std::vector<GgufWriterTensor>& tensors, std::uint64_t alignment = 32);

}  // namespace cpudl::llm
