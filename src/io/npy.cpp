// NumPy .npy reading and writing: a magic string, a version, a little header that is a Python
// dict literal ({'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }), then raw data.
// The header is parsed strictly by hand (it is a tiny fixed grammar, not general Python).
#include <cstring>

#include "cpudl/error.h"
#include "cpudl/io.h"

namespace cpudl::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

struct Header {
  std::string descr;
  bool fortran = false;
  Shape shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  Header parse() {
    Header h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = quoted();
      expect(':');
      if (key == "descr") {
        h.descr = quoted();
        seen_descr = true;
      } else if (key == "fortran_order") {
        h.fortran = boolean();
        seen_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        seen_shape = true;
      } else {
        fail("unknown header key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') ++pos_;
    }
    if (!seen_descr || !seen_order || !seen_shape) fail("header lacks 'descr', 'fortran_order' or 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(file_ + ": not a valid .npy file: " + what);
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= text_.size()) fail("header ends early");
    return text_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "' in the header");
    ++pos_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string in the header");
    const std::size_t end = text_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string in the header");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    if (text_.substr(pos_, 4) == "True") return pos_ += 4, true;
    if (text_.substr(pos_, 5) == "False") return pos_ += 5, false;
    fail("fortran_order is not True or False");
  }
  Shape tuple() {
    Shape shape;
    expect('(');
    while (peek() != ')') {
      std::int64_t v = 0;
      std::size_t digits = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (v > (std::int64_t{1} << 40)) fail("a dimension is too large");
        v = v * 10 + (text_[pos_++] - '0');
        ++digits;
      }
      if (digits == 0) fail("shape holds something other than non-negative integers");
      shape.push_back(v);
      if (peek() == ',') ++pos_;
    }
    ++pos_;
    return shape;
  }

  std::string_view text_;
  const std::string& file_;
  std::size_t pos_ = 0;
};

std::string descr_of(DType t) {
  switch (t) {
    case DType::f32:
      return "<f4";
    case DType::i64:
      return "<i8";
    case DType::i32:
      return "<i4";
    case DType::i8:
      return "|i1";
    case DType::u8:
      return "|u1";
    default:
      throw Error("cannot write a " + std::string(dtype_name(t)) + " tensor as .npy");
  }
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& name) {
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0)
    throw Error(name + ": not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw Error(name + ": not a valid .npy file: truncated header");
    for (int i = 3; i >= 0; --i)
      header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + static_cast<std::size_t>(i)]);
    header_at = 12;
  } else {
    throw Error(name + ": .npy version " + std::to_string(major) + " is not supported (1, 2 and 3 are)");
  }
  if (header_len > bytes.size() - header_at) throw Error(name + ": not a valid .npy file: truncated header");
  const Header h = HeaderParser(std::string_view(bytes).substr(header_at, header_len), name).parse();
  if (h.fortran)
    throw Error(name + ": Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  DType dtype;
  if (h.descr == "<f4")
    dtype = DType::f32;
  else if (h.descr == "<i8")
    dtype = DType::i64;
  else if (h.descr == "<i4")
    dtype = DType::i32;
  else if (h.descr == "|i1" || h.descr == "|b1")
    dtype = DType::i8;
  else if (h.descr == "|u1")
    dtype = DType::u8;
  else
    throw Error(name + ": element type '" + h.descr +
                "' is not supported (float32, int64, int32, int8, uint8, bool are)");
  std::int64_t count = 1;
  for (std::int64_t d : h.shape) {
    if (d > 0 && count > (std::int64_t{1} << 40) / d) throw Error(name + ": shape too large");
    count *= d;
  }
  const std::size_t data_at = header_at + header_len;
  const std::size_t want = static_cast<std::size_t>(count) * dtype_size(dtype);
  if (bytes.size() - data_at != want)
    throw Error(name + ": holds " + std::to_string(bytes.size() - data_at) + " data bytes, shape " +
                shape_text(h.shape) + " of " + h.descr + " needs " + std::to_string(want));
  return Tensor::from_buffer(bytes.data() + data_at, h.shape, dtype);
}

Tensor load_npy(const std::filesystem::path& path) { return parse_npy(read_file(path), path.string()); }

std::string serialize_npy(const Tensor& tensor) {
  const Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
  std::string shape = "(";
  for (std::int64_t d : t.shape()) shape += std::to_string(d) + ", ";
  if (t.shape().size() > 1)
    shape.resize(shape.size() - 2);  // (2, 3), but (3,) and ()
  else if (t.shape().size() == 1)
    shape.resize(shape.size() - 1);
  shape += ")";
  std::string header =
      "{'descr': '" + descr_of(t.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that the data starts 64-byte aligned, then a newline (as NumPy does).
  const std::size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out(kMagic, 6);
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  const std::size_t bytes = static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
  out.append(static_cast<const char*>(t.raw_data()), bytes);
  return out;
}

void save_npy(const std::filesystem::path& path, const Tensor& tensor) {
  write_file_atomically(path, serialize_npy(tensor));
}

}  // namespace cpudl::io
