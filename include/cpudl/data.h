// Datasets from files: the IDX format of MNIST (plain or gzip) into tensors.
#pragma once

#include <cstdint>
#include <filesystem>
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
  Tensor images;  // [N, 1, H, W] f32, (pixel / 255 - mean) / std
  Tensor labels;  // [N] i64
};
// MNIST from DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz], normalised as the popular
// tutorial does (mean 0.5, std 0.5). Labels must lie in 0..9 and match the image count.
Dataset load_mnist(const std::filesystem::path& dir, bool train, float mean = 0.5f, float std = 0.5f);

}  // namespace cpudl::data
