// GGUF reading (memory-mapped, validated) and writing. Layout: magic "GGUF", version, tensor
// count, metadata count, the metadata key/values, the tensor infos, padding to the alignment,
// then the data section where each tensor starts at an aligned offset.
#include "llm/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "cpudl/error.h"
#include "cpudl/io.h"
#include "io/file_kind.h"

namespace cpudl::llm {

namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr std::uint64_t kMaxDims = 4;
constexpr std::size_t kMaxNameBytes = 256;

std::size_t scalar_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
      return 8;
    case GgufValueType::string:
      return 8;  // at least its length field
    case GgufValueType::array:
      return 12;
  }
  return 0;
}

// A bounds-checked cursor over the file; every read names what it was reading when it fails.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  [[noreturn]] void fail(const std::string& why) const { throw Error(file_ + ": " + why); }

  template <class T>
  T read(const char* what) {
    if (bytes_.size() - pos_ < sizeof(T))
      fail(std::string("truncated: the file ends inside ") + what + " (offset " + std::to_string(pos_) + ")");
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string_view read_string(const std::string& what) {
    const auto length = read<std::uint64_t>(what.c_str());
    if (length > bytes_.size() - pos_)
      fail("truncated: " + what + " has length " + std::to_string(length) + " but only " +
           std::to_string(bytes_.size() - pos_) + " bytes remain");
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    return s;
  }

  std::size_t remaining() const { return bytes_.size() - pos_; }
  std::size_t position() const { return pos_; }

 private:
  std::span<const std::uint8_t> bytes_;
  const std::string& file_;
  std::size_t pos_ = 0;
};

bool valid_value_type(std::uint32_t t) { return t <= 12; }

void read_scalar(Reader& r, GgufValueType type, GgufValue& v, const std::string& what) {
  v.type = type;
  switch (type) {
    case GgufValueType::u8:
      v.i = r.read<std::uint8_t>(what.c_str());
      break;
    case GgufValueType::i8:
      v.i = r.read<std::int8_t>(what.c_str());
      break;
    case GgufValueType::u16:
      v.i = r.read<std::uint16_t>(what.c_str());
      break;
    case GgufValueType::i16:
      v.i = r.read<std::int16_t>(what.c_str());
      break;
    case GgufValueType::u32:
      v.i = r.read<std::uint32_t>(what.c_str());
      break;
    case GgufValueType::i32:
      v.i = r.read<std::int32_t>(what.c_str());
      break;
    case GgufValueType::i64:
      v.i = r.read<std::int64_t>(what.c_str());
      break;
    case GgufValueType::u64: {
      const auto u = r.read<std::uint64_t>(what.c_str());
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        r.fail(what + ": value " + std::to_string(u) + " is too large");
      v.i = static_cast<std::int64_t>(u);
      break;
    }
    case GgufValueType::boolean: {
      const auto b = r.read<std::uint8_t>(what.c_str());
      if (b > 1) r.fail(what + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      v.i = b;
      break;
    }
    case GgufValueType::f32:
      v.f = r.read<float>(what.c_str());
      return;
    case GgufValueType::f64:
      v.f = r.read<double>(what.c_str());
      return;
    case GgufValueType::string:
      v.str = r.read_string(what);
      return;
    case GgufValueType::array:
      r.fail(what + ": arrays of arrays are not supported");
  }
  v.f = static_cast<double>(v.i);
}

GgufValue read_value(Reader& r, const std::string& key) {
  const auto type_id = r.read<std::uint32_t>("a metadata value type");
  if (!valid_value_type(type_id))
    r.fail("metadata '" + key + "': unknown value type " + std::to_string(type_id));
  const auto type = static_cast<GgufValueType>(type_id);
  GgufValue v;
  if (type != GgufValueType::array) {
    read_scalar(r, type, v, "metadata '" + key + "'");
    return v;
  }
  v.type = GgufValueType::array;
  const auto elem_id = r.read<std::uint32_t>("an array element type");
  if (!valid_value_type(elem_id))
    r.fail("metadata '" + key + "': unknown array element type " + std::to_string(elem_id));
  v.array_type = static_cast<GgufValueType>(elem_id);
  const auto count = r.read<std::uint64_t>("an array length");
  // Checked before reserving: a corrupted count must not become a huge allocation.
  if (count > r.remaining() / scalar_bytes(v.array_type))
    r.fail("metadata '" + key + "': array of " + std::to_string(count) + " " +
           gguf_value_type_name(v.array_type) + " does not fit in the " + std::to_string(r.remaining()) +
           " bytes left");
  const std::string what = "metadata '" + key + "' element";
  if (v.array_type == GgufValueType::string) {
    v.strings.reserve(static_cast<std::size_t>(count));
    for (std::uint64_t i = 0; i < count; ++i) v.strings.push_back(r.read_string(what));
  } else {
    v.numbers.reserve(static_cast<std::size_t>(count));
    GgufValue element;
    for (std::uint64_t i = 0; i < count; ++i) {
      read_scalar(r, v.array_type, element, what);
      v.numbers.push_back(element.f);
    }
  }
  return v;
}

bool is_integer(GgufValueType t) {
  return t != GgufValueType::f32 && t != GgufValueType::f64 && t != GgufValueType::string &&
         t != GgufValueType::array && t != GgufValueType::boolean;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* const kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                       "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto i = static_cast<std::uint32_t>(type);
  return i < 13 ? kNames[i] : "unknown";
}

std::uint64_t GgufTensor::elements() const {
  std::uint64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

GgufFile GgufFile::parse(std::span<const std::uint8_t> bytes, const std::string& name) {
  GgufFile file;
  file.name_ = name;
  file.bytes_ = bytes;
  Reader r(bytes, file.name_);
  if (bytes.size() < 4 || r.read<std::uint32_t>("the magic") != kMagic) {
    const std::string_view head(reinterpret_cast<const char*>(bytes.data()),
                                std::min<std::size_t>(bytes.size(), 16));
    if (const io::FileKind kind = io::file_kind(head, bytes.size()); kind != io::FileKind::unknown)
      r.fail(io::file_kind_description(kind) + ", not a GGUF file");
    r.fail("not a GGUF file (the first 4 bytes are not \"GGUF\")");
  }
  file.version_ = r.read<std::uint32_t>("the version");
  if (file.version_ != 2 && file.version_ != 3)
    r.fail("GGUF version " + std::to_string(file.version_) + " is not supported (expected 2 or 3)");
  const auto n_tensors = r.read<std::uint64_t>("the tensor count");
  const auto n_kv = r.read<std::uint64_t>("the metadata count");
  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at
  // least 8 + 4 + 8 + 4 + 8.
  if (n_kv > r.remaining() / 13)
    r.fail("metadata count " + std::to_string(n_kv) + " exceeds what the file can hold");
  if (n_tensors > r.remaining() / 32)
    r.fail("tensor count " + std::to_string(n_tensors) + " exceeds what the file can hold");

  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::string key(r.read_string("metadata key " + std::to_string(i)));
    if (key.empty()) r.fail("metadata key " + std::to_string(i) + " is empty");
    GgufValue value = read_value(r, key);
    if (!file.metadata_.emplace(key, std::move(value)).second)
      r.fail("metadata key '" + key + "' appears twice");
  }
  if (const GgufValue* a = file.find("general.alignment")) {
    if (!is_integer(a->type) || a->i <= 0 || (a->i & (a->i - 1)) != 0 || a->i > (1 << 20))
      r.fail("general.alignment must be a power of two up to 1 MiB");
    file.alignment_ = static_cast<std::uint64_t>(a->i);
  }

  file.tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = std::string(r.read_string("tensor name " + std::to_string(i)));
    if (t.name.empty() || t.name.size() > kMaxNameBytes)
      r.fail("tensor " + std::to_string(i) + ": name is empty or longer than " +
             std::to_string(kMaxNameBytes) + " bytes");
    const std::string where = "tensor '" + t.name + "'";
    const auto n_dims = r.read<std::uint32_t>("a tensor's dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      r.fail(where + ": " + std::to_string(n_dims) + " dimensions (expected 1 to 4)");
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = r.read<std::uint64_t>("a tensor dimension");
      if (dim == 0 || dim > (std::uint64_t{1} << 40) || elements > (std::uint64_t{1} << 50) / dim)
        r.fail(where + ": dimension " + std::to_string(d) + " is " + std::to_string(dim) + " (out of range)");
      elements *= dim;
      t.dims.push_back(dim);
    }
    const auto type_id = r.read<std::uint32_t>("a tensor type");
    const GgmlTypeInfo* info = ggml_type_info(type_id);
    if (info == nullptr) r.fail(where + ": unknown tensor type " + std::to_string(type_id));
    t.type = static_cast<GgmlType>(type_id);
    if (t.dims[0] % info->block_size != 0)
      r.fail(where + ": row length " + std::to_string(t.dims[0]) + " is not a multiple of the " + info->name +
             " block size " + std::to_string(info->block_size));
    t.bytes = elements / info->block_size * info->block_bytes;
    t.offset = r.read<std::uint64_t>("a tensor offset");
    if (t.offset % file.alignment_ != 0)
      r.fail(where + ": data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(file.alignment_));
    if (!file.tensor_index_.emplace(t.name, file.tensors_.size()).second) r.fail(where + " appears twice");
    file.tensors_.push_back(std::move(t));
  }

  const std::uint64_t data_start = (r.position() + file.alignment_ - 1) / file.alignment_ * file.alignment_;
  const std::uint64_t data_size = bytes.size() >= data_start ? bytes.size() - data_start : 0;
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : file.tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      r.fail("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", " +
             std::to_string(t.offset + t.bytes) + ") runs past the end of the data section (" +
             std::to_string(data_size) + " bytes): truncated file?");
    t.data = bytes.data() + data_start + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      r.fail("tensor '" + by_offset[i]->name + "' overlaps tensor '" + by_offset[i - 1]->name + "'");
  return file;
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path.string() + ": not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* base = nullptr;
  if (size > 0) {
    base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(path.string() + ": cannot map (" + why + ")");
    }
  }
  ::close(fd);  // the mapping keeps the file
  std::shared_ptr<void> mapping(base, [size](void* p) {
    if (p != nullptr) ::munmap(p, size);
  });
  GgufFile file = parse({static_cast<const std::uint8_t*>(base), size}, path.string());
  file.mapping_ = std::move(mapping);
  return file;
}

void GgufFile::advise_will_need() const {
  if (mapping_ != nullptr) ::madvise(mapping_.get(), bytes_.size(), MADV_WILLNEED);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void key_error(const std::string& file, std::string_view key, const std::string& why) {
  throw Error(file + ": metadata '" + std::string(key) + "' " + why);
}
}  // namespace

std::string_view GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) key_error(name_, key, "is missing");
  if (v->type != GgufValueType::string)
    key_error(name_, key, std::string("is a ") + gguf_value_type_name(v->type) + ", expected a string");
  return v->str;
}

std::int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) key_error(name_, key, "is missing");
  if (!is_integer(v->type))
    key_error(name_, key, std::string("is a ") + gguf_value_type_name(v->type) + ", expected an integer");
  return v->i;
}

std::int64_t GgufFile::get_int(std::string_view key, std::int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) key_error(name_, key, "is missing");
  if (v->type == GgufValueType::string || v->type == GgufValueType::array ||
      v->type == GgufValueType::boolean)
    key_error(name_, key, std::string("is a ") + gguf_value_type_name(v->type) + ", expected a number");
  return v->f;
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufValueType::boolean)
    key_error(name_, key, std::string("is a ") + gguf_value_type_name(v->type) + ", expected a bool");
  return v->i != 0;
}

const std::vector<std::string_view>& GgufFile::get_strings(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) key_error(name_, key, "is missing");
  if (v->type != GgufValueType::array || v->array_type != GgufValueType::string)
    key_error(name_, key, "is not an array of strings");
  return v->strings;
}

const std::vector<double>& GgufFile::get_numbers(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) key_error(name_, key, "is missing");
  if (v->type != GgufValueType::array || v->array_type == GgufValueType::string)
    key_error(name_, key, "is not an array of numbers");
  return v->numbers;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) throw Error(name_ + ": tensor '" + std::string(name) + "' is missing");
  return *t;
}

// ---- writing ----

namespace {
template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}
void put_string(std::string& out, std::string_view s) {
  put<std::uint64_t>(out, s.size());
  out.append(s);
}
void put_scalar(std::string& out, GgufValueType type, std::int64_t i, double f, std::string_view s) {
  switch (type) {
    case GgufValueType::u8:
      put<std::uint8_t>(out, static_cast<std::uint8_t>(i));
      break;
    case GgufValueType::i8:
      put<std::int8_t>(out, static_cast<std::int8_t>(i));
      break;
    case GgufValueType::u16:
      put<std::uint16_t>(out, static_cast<std::uint16_t>(i));
      break;
    case GgufValueType::i16:
      put<std::int16_t>(out, static_cast<std::int16_t>(i));
      break;
    case GgufValueType::u32:
      put<std::uint32_t>(out, static_cast<std::uint32_t>(i));
      break;
    case GgufValueType::i32:
      put<std::int32_t>(out, static_cast<std::int32_t>(i));
      break;
    case GgufValueType::u64:
      put<std::uint64_t>(out, static_cast<std::uint64_t>(i));
      break;
    case GgufValueType::i64:
      put<std::int64_t>(out, i);
      break;
    case GgufValueType::boolean:
      put<std::uint8_t>(out, i != 0 ? 1 : 0);
      break;
    case GgufValueType::f32:
      put<float>(out, static_cast<float>(f));
      break;
    case GgufValueType::f64:
      put<double>(out, f);
      break;
    case GgufValueType::string:
      put_string(out, s);
      break;
    case GgufValueType::array:
      throw Error("GGUF writer: arrays of arrays are not supported");
  }
}
}  // namespace

void write_gguf(const std::filesystem::path& path, const std::vector<GgufWriterValue>& metadata,
                const std::vector<GgufWriterTensor>& tensors, std::uint64_t alignment) {
  std::string header;
  put<std::uint32_t>(header, kMagic);
  put<std::uint32_t>(header, 3);
  put<std::uint64_t>(header, tensors.size());
  put<std::uint64_t>(header, metadata.size() + (alignment != 32 ? 1 : 0));
  for (const auto& [key, v] : metadata) {
    put_string(header, key);
    put<std::uint32_t>(header, static_cast<std::uint32_t>(v.type));
    if (v.type != GgufValueType::array) {
      put_scalar(header, v.type, v.i, v.f, v.str);
      continue;
    }
    put<std::uint32_t>(header, static_cast<std::uint32_t>(v.array_type));
    if (v.array_type == GgufValueType::string) {
      put<std::uint64_t>(header, v.strings.size());
      for (auto s : v.strings) put_string(header, s);
    } else {
      put<std::uint64_t>(header, v.numbers.size());
      for (double x : v.numbers) put_scalar(header, v.array_type, static_cast<std::int64_t>(x), x, {});
    }
  }
  if (alignment != 32) {
    put_string(header, "general.alignment");
    put<std::uint32_t>(header, static_cast<std::uint32_t>(GgufValueType::u32));
    put<std::uint32_t>(header, static_cast<std::uint32_t>(alignment));
  }
  auto padding = [&](std::uint64_t n) { return (alignment - n % alignment) % alignment; };
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<std::uint32_t>(t.type));
    std::uint64_t elements = 1;
    for (auto d : t.dims) elements *= d;
    if (info == nullptr || t.dims.empty() || t.dims[0] % info->block_size != 0 ||
        elements / info->block_size * info->block_bytes != t.data.size())
      throw Error(path.string() + ": tensor '" + t.name + "': data size does not match its type and shape");
    put_string(header, t.name);
    put<std::uint32_t>(header, static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims) put<std::uint64_t>(header, d);
    put<std::uint32_t>(header, static_cast<std::uint32_t>(t.type));
    put<std::uint64_t>(header, offset);
    offset += t.data.size() + padding(t.data.size());
  }
  static const std::string kZeros(1 << 20, '\0');
  std::vector<std::string_view> pieces;
  pieces.emplace_back(header);
  pieces.emplace_back(kZeros.data(), static_cast<std::size_t>(padding(header.size())));
  for (const auto& t : tensors) {
    pieces.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size());
    pieces.emplace_back(kZeros.data(), static_cast<std::size_t>(padding(t.data.size())));
  }
  io::write_file_atomically(path, pieces);
}

}  // namespace cpudl::llm
