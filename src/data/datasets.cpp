// CIFAR-10 batches, CSV files, and detecting which dataset a directory holds.
#include <fstream>
#include <sstream>

#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/io.h"

namespace cpudl::data {

Dataset load_cifar10(const std::filesystem::path& dir, bool train) {
  std::vector<std::filesystem::path> files;
  if (train)
    for (int i = 1; i <= 5; ++i) files.push_back(dir / ("data_batch_" + std::to_string(i) + ".bin"));
  else
    files.push_back(dir / "test_batch.bin");
  constexpr std::size_t kRecord = 1 + 3 * 32 * 32;
  std::string bytes;
  for (const auto& f : files) {
    std::string part = io::read_file(f);
    if (part.empty() || part.size() % kRecord != 0)
      throw Error(f.string() + ": " + std::to_string(part.size()) +
                  " bytes is not a whole number of 3073-byte CIFAR-10 records");
    bytes += part;
  }
  const auto n = static_cast<std::int64_t>(bytes.size() / kRecord);
  Dataset ds{Tensor::empty({n, 3, 32, 32}),
             Tensor::empty({n}, DType::i64),
             "cifar10",
             {0.4914f, 0.4822f, 0.4465f},
             {0.2470f, 0.2435f, 0.2616f},
             10,
             {}};
  float* px = ds.images.data();
  auto* lab = ds.labels.data_as<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto* rec =
        reinterpret_cast<const unsigned char*>(bytes.data()) + static_cast<std::size_t>(i) * kRecord;
    if (rec[0] > 9)
      throw Error(files[0].parent_path().string() + ": CIFAR-10 record " + std::to_string(i) + " has label " +
                  std::to_string(rec[0]));
    lab[i] = rec[0];
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t p = 0; p < 1024; ++p)
        px[(static_cast<std::size_t>(i) * 3 + c) * 1024 + p] =
            (rec[1 + c * 1024 + p] / 255.0f - ds.mean[c]) / ds.std[c];
  }
  return ds;
}

Dataset load_csv(const std::filesystem::path& path, std::int64_t classes) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open");
  std::vector<float> features;
  std::vector<std::int64_t> labels;
  std::size_t columns = 0;
  std::string line;
  for (std::size_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<double> row;
    std::stringstream cells(line);
    bool numeric = true;
    std::size_t col = 0;
    for (std::string cell; std::getline(cells, cell, ','); ++col) {
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      if (cell.empty() || *end != '\0') {
        if (line_no == 1 && labels.empty()) {
          numeric = false;
          break;
        }
        throw Error(path.string() + ":" + std::to_string(line_no) + ": column " + std::to_string(col + 1) +
                    " ('" + cell + "') is not a number");
      }
      row.push_back(v);
    }
    if (!numeric) continue;  // header
    if (row.size() < 2)
      throw Error(path.string() + ":" + std::to_string(line_no) + ": needs at least one feature and a label");
    if (columns == 0) columns = row.size();
    if (row.size() != columns)
      throw Error(path.string() + ":" + std::to_string(line_no) + ": " + std::to_string(row.size()) +
                  " columns, the first row had " + std::to_string(columns));
    const double label = row.back();
    if (label < 0 || label != static_cast<double>(static_cast<std::int64_t>(label)) ||
        (classes > 0 && label >= static_cast<double>(classes)))
      throw Error(path.string() + ":" + std::to_string(line_no) + ": label " + std::to_string(label) +
                  " is not a class index" + (classes > 0 ? " in [0, " + std::to_string(classes) + ")" : ""));
    labels.push_back(static_cast<std::int64_t>(label));
    for (std::size_t j = 0; j + 1 < row.size(); ++j) features.push_back(static_cast<float>(row[j]));
  }
  if (labels.empty()) throw Error(path.string() + ": no samples");
  const auto n = static_cast<std::int64_t>(labels.size()), f = static_cast<std::int64_t>(columns - 1);
  Dataset ds{Tensor::from_vector(features, {n, f}),
             Tensor::from_buffer(labels.data(), {n}, DType::i64),
             "csv",
             {},
             {},
             0,
             {}};
  std::int64_t max_label = 0;
  for (auto l : labels) max_label = std::max(max_label, l);
  ds.classes = classes > 0 ? classes : max_label + 1;
  return ds;
}

Dataset load_dataset(const std::filesystem::path& dir, bool train, const Shape& sample_shape) {
  if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": no such data directory");
  auto exists = [&](const std::string& name) {
    return std::filesystem::exists(dir / name) || std::filesystem::exists(dir / (name + ".gz"));
  };
  if (exists("train-images-idx3-ubyte") || exists("t10k-images-idx3-ubyte")) {
    return load_mnist(dir, train);
  }
  if (std::filesystem::exists(dir / "data_batch_1.bin") || std::filesystem::exists(dir / "test_batch.bin"))
    return load_cifar10(dir, train);
  if (std::filesystem::exists(dir / "train.csv")) {
    // Classes from the training file, so train and test agree.
    const std::int64_t classes = load_csv(dir / "train.csv").classes;
    return load_csv(dir / (train ? "train.csv" : "test.csv"), classes);
  }
  if (is_image_folder(dir)) return load_image_folder(dir, train, sample_shape);
  throw Error(
      dir.string() +
      ": holds no MNIST IDX files, CIFAR-10 batches, train.csv/test.csv or image folder (CLASS/IMAGE.png)");
}

}  // namespace cpudl::data
