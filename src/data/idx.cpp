// IDX reading through zlib's gz* API, which reads plain and gzip files alike.
#include <zlib.h>

#include <memory>

#include "cpudl/data.h"
#include "cpudl/error.h"

namespace cpudl::data {

namespace {
struct GzClose {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzClose>;

// Reads exactly n bytes; false on a short read.
bool read_exact(gzFile f, void* out, std::size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const int chunk = static_cast<int>(std::min<std::size_t>(n, 1u << 30));
    const int got = gzread(f, p, static_cast<unsigned>(chunk));
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}
}  // namespace

IdxArray read_idx(const std::filesystem::path& path) {
  const std::string name = path.string();
  GzFile f(gzopen(name.c_str(), "rb"));
  if (!f) throw Error(name + ": cannot open");
  unsigned char magic[4];
  if (!read_exact(f.get(), magic, 4)) throw Error(name + ": truncated (no 4-byte IDX magic number)");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4)
    throw Error(name + ": not an unsigned-byte IDX file (magic " + std::to_string(magic[0]) + " " + std::to_string(magic[1]) +
                " " + std::to_string(magic[2]) + " " + std::to_string(magic[3]) + ", expected 0 0 8 <dims>)");
  IdxArray out;
  std::uint64_t count = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    if (!read_exact(f.get(), b, 4)) throw Error(name + ": truncated in the dimension sizes");
    const std::uint32_t size = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
    if (size == 0 || size > (1u << 28)) throw Error(name + ": dimension " + std::to_string(d) + " has size " + std::to_string(size));
    count *= size;
    if (count > (std::uint64_t{1} << 34)) throw Error(name + ": dimensions describe more than 16 GiB");
    out.dims.push_back(size);
  }
  out.values.resize(static_cast<std::size_t>(count));
  if (!read_exact(f.get(), out.values.data(), out.values.size()))
    throw Error(name + ": truncated: the header promises " + std::to_string(count) + " values");
  unsigned char extra;
  if (gzread(f.get(), &extra, 1) > 0)
    throw Error(name + ": longer than its header says (" + std::to_string(count) + " values): wrong dimensions?");
  return out;
}

Dataset load_mnist(const std::filesystem::path& dir, bool train, float mean, float std) {
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": no such data directory");
  const std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& base) {
    for (const char* suffix : {"", ".gz"}) {
      const auto p = dir / (base + suffix);
      if (std::filesystem::exists(p)) return p;
    }
    throw Error((dir / base).string() + "[.gz]: missing (run scripts/fetch-mnist.sh " + dir.string() + ")");
  };
  const auto image_path = find(prefix + "-images-idx3-ubyte"), label_path = find(prefix + "-labels-idx1-ubyte");
  const IdxArray images = read_idx(image_path), labels = read_idx(label_path);
  if (images.dims.size() != 3) throw Error(image_path.string() + ": expected 3 dimensions (count, rows, cols)");
  if (labels.dims.size() != 1) throw Error(label_path.string() + ": expected 1 dimension (count)");
  if (images.dims[0] != labels.dims[0])
    throw Error(image_path.string() + " holds " + std::to_string(images.dims[0]) + " images but " + label_path.string() +
                " holds " + std::to_string(labels.dims[0]) + " labels");
  const std::int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  Dataset ds{Tensor::empty({n, 1, h, w}), Tensor::empty({n}, DType::i64)};
  float* px = ds.images.data();
  for (std::size_t i = 0; i < images.values.size(); ++i) px[i] = (static_cast<float>(images.values[i]) / 255.0f - mean) / std;
  auto* lab = ds.labels.data_as<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t v = labels.values[static_cast<std::size_t>(i)];
    if (v > 9) throw Error(label_path.string() + ": label " + std::to_string(v) + " at index " + std::to_string(i) + " is outside 0..9");
    lab[i] = v;
  }
  return ds;
}

}  // namespace cpudl::data
