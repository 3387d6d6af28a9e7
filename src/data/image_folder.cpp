// torchvision's ImageFolder layout as a Dataset (cpudl/data.h: load_image_folder): DIR/CLASS/*.png
// (or .jpg, .jpeg, .pgm), the classes in sorted order, with an optional train/ and test/ (or val/)
// split above them. Images are decoded as they come (image_decode.cpp) and brought to one sample
// shape: the first training image's size, colour if any training image is (resize_image).
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "cpudl/data.h"
#include "cpudl/error.h"

namespace cpudl::data {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> sorted_entries(const fs::path& dir, bool directories) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (directories ? e.is_directory() : (e.is_regular_file() && is_image_file(e.path())))
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The folder the split's images are in: DIR/train and DIR/test (or val), or DIR itself.
fs::path split_root(const fs::path& dir, bool train) {
  if (!fs::is_directory(dir / "train")) return dir;
  if (train) return dir / "train";
  for (const char* name : {"test", "val"})
    if (fs::is_directory(dir / name)) return dir / name;
  throw Error(dir.string() + ": an image folder with train/ but no test/ or val/ beside it");
}

}  // namespace

bool is_image_file(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".pgm";
}

bool is_image_folder(const std::filesystem::path& dir) {
  const fs::path root = split_root(dir, true);
  if (!fs::is_directory(root)) return false;
  for (const fs::path& cls : sorted_entries(root, true))
    if (!sorted_entries(cls, false).empty()) return true;
  return false;
}

bool has_test_split(const std::filesystem::path& dir) {
  return !is_image_folder(dir) || fs::is_directory(dir / "test") || fs::is_directory(dir / "val");
}

Dataset load_image_folder(const std::filesystem::path& dir, bool train, const Shape& sample_shape) {
  const fs::path train_root = split_root(dir, true), root = split_root(dir, train);
  Dataset d;
  d.kind = "image_folder";
  for (const fs::path& cls : sorted_entries(train_root, true))
    d.class_names.push_back(cls.filename().string());
  if (d.class_names.empty())
    throw Error(train_root.string() + ": no class folders (expected CLASS/IMAGE.png)");
  d.classes = static_cast<std::int64_t>(d.class_names.size());
  std::vector<Tensor> images;
  std::vector<std::int64_t> labels;
  for (const fs::path& cls : sorted_entries(root, true)) {
    const auto at = std::find(d.class_names.begin(), d.class_names.end(), cls.filename().string());
    if (at == d.class_names.end())
      throw Error(cls.string() + ": a class the training folder " + train_root.string() + " does not have");
    for (const fs::path& file : sorted_entries(cls, false)) {
      images.push_back(read_image(file));
      labels.push_back(at - d.class_names.begin());
    }
  }
  if (images.empty())
    throw Error(root.string() + ": no images (.png, .jpg, .jpeg, .pgm) in its class folders");
  // One sample shape: the caller's (a model's input), else the training images' first size, in
  // colour if any training image is.
  Shape shape = sample_shape;
  if (shape.empty()) {
    std::vector<Tensor> training;  // the training split's images decide, for every split
    if (!train)
      for (const fs::path& cls : sorted_entries(train_root, true))
        for (const fs::path& file : sorted_entries(cls, false)) training.push_back(read_image(file));
    const std::vector<Tensor>& decide = train ? images : training;
    if (decide.empty())
      throw Error(train_root.string() + ": no training images to take the sample size from");
    const bool colour =
        std::any_of(decide.begin(), decide.end(), [](const Tensor& t) { return t.size(0) == 3; });
    shape = {colour ? 3 : 1, decide[0].size(1), decide[0].size(2)};
  }
  Tensor all = Tensor::empty({static_cast<std::int64_t>(images.size()), shape[0], shape[1], shape[2]});
  const std::int64_t sample = shape_numel(shape);
  for (std::size_t i = 0; i < images.size(); ++i) {
    const Tensor img = resize_image(convert_channels(images[i], shape[0]), shape[1], shape[2]).contiguous();
    // Normalised as the MNIST tutorial does (mean 0.5, std 0.5 per channel): the same for every
    // split, so a test folder needs nothing from the training one.
    float* out = all.data() + static_cast<std::int64_t>(i) * sample;
    for (std::int64_t k = 0; k < sample; ++k) out[k] = (img.data()[k] - 0.5f) / 0.5f;
  }
  d.images = all;
  d.labels = Tensor::from_buffer(labels.data(), {static_cast<std::int64_t>(labels.size())}, DType::i64);
  d.mean.assign(static_cast<std::size_t>(shape[0]), 0.5f);
  d.std.assign(static_cast<std::size_t>(shape[0]), 0.5f);
  return d;
}

}  // namespace cpudl::data
