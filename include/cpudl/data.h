// Datasets from files: the IDX format of MNIST (plain or gzip) into tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cpudl/tensor.h"

namespace cpudl::data {

// One IDX file of unsigned bytes (type 0x08): its dimensions and values.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> values;
};
// Reads a plain or gzip-compressed IDX file. Errors name the file and what is wrong (magic,
// dimensions, a size that disagrees with the dimensions, truncation).
IdxArray read_idx(const std::filesystem::path& path);
// The same on bytes already in memory (what the fuzz target drives).
IdxArray parse_idx(std::string_view bytes, const std::string& name_for_errors);

struct Dataset {
  Tensor images;                 // [N, C, H, W] f32 normalised, or [N, F] features for CSV
  Tensor labels;                 // [N] i64
  std::string kind;              // "mnist", "cifar10", "csv"
  std::vector<float> mean, std;  // the per-channel normalisation applied (empty for CSV)
  std::int64_t classes = 10;
  std::vector<std::string> class_names;  // an image folder's (its class directories); else empty
};
// MNIST from DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz], normalised as the popular
// tutorial does (mean 0.5, std 0.5). Labels must lie in 0..9 and match the image count.
Dataset load_mnist(const std::filesystem::path& dir, bool train, float mean = 0.5f, float std = 0.5f);

// CIFAR-10 binary batches: DIR/data_batch_{1..5}.bin (train) or DIR/test_batch.bin, records of
// one label byte and 3x32x32 pixel bytes, normalised per channel with CIFAR-10's statistics.
Dataset load_cifar10(const std::filesystem::path& dir, bool train);
// CSV: one sample per line, numeric features then an integer label in the last column; a first
// line that does not parse as numbers is a header. Errors name the file, line and column.
Dataset load_csv(const std::filesystem::path& path, std::int64_t classes = 0);
// Whichever of MNIST, CIFAR-10, train.csv/test.csv or an image folder the directory holds; an
// image folder's samples take `sample_shape` when given (a model's input).
Dataset load_dataset(const std::filesystem::path& dir, bool train, const Shape& sample_shape = {});

// An image file as [channels, height, width] floats in [0, 1]: binary or ASCII PGM (P5/P2), PNG
// (any colour type and bit depth, interlaced or not; 16-bit as value / 65535) or JPEG. Grey files
// give 1 channel, colour ones (palette PNGs included) RGB; alpha is dropped.
Tensor read_image(const std::filesystem::path& path);
// The same from the file's bytes (an HTTP request body); `name` is what errors call it.
Tensor decode_image(const std::string& bytes, const std::string& name);
// An image [C, H, W] resized to height x width: bilinear, antialiased when it shrinks (PIL's and
// torchvision's interpolate(..., antialias=True), align_corners false). Returns the image itself
// when the size is already that.
Tensor resize_image(const Tensor& image, std::int64_t height, std::int64_t width);
// An image [C, H, W] with `channels` channels: RGB to grey by luminance (PIL's convert("L")), grey
// to RGB by repetition; the image itself when it has them already.
Tensor convert_channels(const Tensor& image, std::int64_t channels);

// torchvision's ImageFolder: DIR/CLASS/*.png|jpg|jpeg|pgm, classes in sorted name order
// (class_names), split by DIR/train and DIR/test (or val) when those exist. Every sample is
// brought to `sample_shape` ([C, H, W]; empty: the first training image's size, colour if any
// training image is) by convert_channels and resize_image, and normalised with mean 0.5, std 0.5.
// A folder without a test split gives all its images for either split (train's --val-split
// carves one out; has_test_split says which).
Dataset load_image_folder(const std::filesystem::path& dir, bool train, const Shape& sample_shape = {});
bool is_image_folder(const std::filesystem::path& dir);
// Whether a file's name says it is an image read_image decodes (.png, .jpg, .jpeg, .pgm, any case).
bool is_image_file(const std::filesystem::path& file);
bool has_test_split(const std::filesystem::path& dir);

// Batches of a dataset in a seeded order, assembled on background threads while the previous
// batch trains. Augmentation (images only): random crop after zero-padding, horizontal flip.
struct LoaderOptions {
  std::int64_t batch = 256;
  bool shuffle = true, drop_last = false;
  std::uint64_t seed = 0;
  std::int64_t crop_padding = 0;  // > 0: random crop of the original size from the padded image
  bool horizontal_flip = false;
  int workers = 1;  // background threads assembling batches (results do not depend on it)
};

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, const LoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  // Starts an epoch: the order depends only on (seed, epoch), so a resumed run sees the same
  // batches. `skip` batches are skipped without being assembled.
  void start_epoch(std::int64_t epoch, std::int64_t skip = 0);
  // The next batch of the epoch; false when the epoch is over.
  bool next(Tensor& x, Tensor& y);
  std::int64_t batches_per_epoch() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cpudl::data
