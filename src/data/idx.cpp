// IDX: a big-endian magic (0, 0, type 0x08 = unsigned byte, number of dims), one 32-bit size per
// dimension, then the values. Files are read whole through zlib, which takes plain and gzip alike.
#include <zlib.h>

#include <memory>

#include "cpudl/data.h"
#include "cpudl/error.h"

namespace cpudl::data {

IdxArray parse_idx(std::string_view bytes, const std::string& name) {
  if (bytes.size() < 4) throw Error(name + ": truncated (no 4-byte IDX magic number)");
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  if (b[0] != 0 || b[1] != 0 || b[2] != 0x08 || b[3] < 1 || b[3] > 4)
    throw Error(name + ": not an unsigned-byte IDX file (magic " + std::to_string(b[0]) + " " +
                std::to_string(b[1]) + " " + std::to_string(b[2]) + " " + std::to_string(b[3]) +
                ", expected 0 0 8 <dims>)");
  const std::size_t ndims = b[3], header = 4 + 4 * ndims;
  if (bytes.size() < header) throw Error(name + ": truncated in the dimension sizes");
  IdxArray out;
  std::uint64_t count = 1;
  for (std::size_t d = 0; d < ndims; ++d) {
    const unsigned char* p = b + 4 + 4 * d;
    const std::uint32_t size =
        (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
    if (size == 0 || size > (1u << 28))
      throw Error(name + ": dimension " + std::to_string(d) + " has size " + std::to_string(size));
    count *= size;
    if (count > (std::uint64_t{1} << 34)) throw Error(name + ": dimensions describe more than 16 GiB");
    out.dims.push_back(size);
  }
  const std::uint64_t have = bytes.size() - header;
  if (have < count)
    throw Error(name + ": truncated: the header promises " + std::to_string(count) +
                " values, the file holds " + std::to_string(have));
  if (have > count)
    throw Error(name + ": longer than its header says (" + std::to_string(count) + " values, " +
                std::to_string(have) + " present): wrong dimensions?");
  out.values.assign(b + header, b + header + count);
  return out;
}

IdxArray read_idx(const std::filesystem::path& path) {
  const std::string name = path.string();
  struct GzClose {
    void operator()(gzFile f) const { gzclose(f); }
  };
  std::unique_ptr<std::remove_pointer_t<gzFile>, GzClose> f(gzopen(name.c_str(), "rb"));
  if (!f) throw Error(name + ": cannot open");
  std::string bytes;
  char buffer[1 << 16];
  for (int n; (n = gzread(f.get(), buffer, sizeof buffer)) > 0;) {
    bytes.append(buffer, static_cast<std::size_t>(n));
    if (bytes.size() > (std::size_t{1} << 35)) throw Error(name + ": larger than 32 GiB");
  }
  int error = Z_OK;
  const char* message = gzerror(f.get(), &error);
  if (error != Z_OK && error != Z_STREAM_END) throw Error(name + ": corrupt gzip data (" + message + ")");
  return parse_idx(bytes, name);
}

}  // namespace cpudl::data
