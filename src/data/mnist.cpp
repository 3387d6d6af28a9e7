// MNIST in its standard file names, as normalised tensors.
#include "cpudl/data.h"
#include "cpudl/error.h"

namespace cpudl::data {

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
  const auto image_path = find(prefix + "-images-idx3-ubyte"),
             label_path = find(prefix + "-labels-idx1-ubyte");
  const IdxArray images = read_idx(image_path), labels = read_idx(label_path);
  if (images.dims.size() != 3)
    throw Error(image_path.string() + ": expected 3 dimensions (count, rows, cols)");
  if (labels.dims.size() != 1) throw Error(label_path.string() + ": expected 1 dimension (count)");
  if (images.dims[0] != labels.dims[0])
    throw Error(image_path.string() + " holds " + std::to_string(images.dims[0]) + " images but " +
                label_path.string() + " holds " + std::to_string(labels.dims[0]) + " labels");
  const std::int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  Dataset ds{Tensor::empty({n, 1, h, w}), Tensor::empty({n}, DType::i64), "mnist", {mean}, {std}, 10, {}};
  float* px = ds.images.data();
  for (std::size_t i = 0; i < images.values.size(); ++i)
    px[i] = (static_cast<float>(images.values[i]) / 255.0f - mean) / std;
  auto* lab = ds.labels.data_as<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t v = labels.values[static_cast<std::size_t>(i)];
    if (v > 9)
      throw Error(label_path.string() + ": label " + std::to_string(v) + " at index " + std::to_string(i) +
                  " is outside 0..9");
    lab[i] = v;
  }
  return ds;
}

}  // namespace cpudl::data
