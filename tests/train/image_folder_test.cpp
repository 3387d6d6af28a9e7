// Image folders (torchvision's ImageFolder layout) through load_image_folder, train, eval,
// predict and export: class names from the folder names, images of any size and kind brought to
// one sample shape, --val-split where the data has no test split.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_sandbox.h"
#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "data/picture.h"

namespace {

namespace fs = std::filesystem;
using cpudl::Tensor;
using cpudl::testing::slurp;
using ImageFolderCli = cpudl::testing::CliSandbox;

const std::string kTiny = std::string(CPUDL_FIXTURES_DIR) + "/../golden/mnist_tiny";

// PNG as cpudl detect --draw writes it (8-bit RGB: grey repeated).
void write_png(const fs::path& file, const cpudl::data::DecodedImage& img) {
  std::ofstream(file, std::ios::binary) << cpudl::data::Picture::from_image(img).png();
}

// A constant grey (or colour) image of h x w as PGM or PNG.
void write_constant(const fs::path& file, int h, int w, int channels, unsigned char value) {
  fs::create_directories(file.parent_path());
  if (file.extension() == ".pgm") {
    std::ofstream(file, std::ios::binary) << "P5\n"
                                          << w << " " << h << "\n255\n"
                                          << std::string(h * w, value);
    return;
  }
  cpudl::data::DecodedImage img{
      channels, h, w, std::vector<float>(static_cast<std::size_t>(channels * h * w), value / 255.0f)};
  write_png(file, img);
}

TEST(ImageFolder, ClassesSizesAndChannelsComeFromTheTrainingFolder) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("cpudl_folder_" + std::to_string(getpid()));
  fs::remove_all(dir);
  write_constant(dir / "train" / "dog" / "a.pgm", 8, 6, 1, 51);     // 0.2: the first image sets 8 x 6
  write_constant(dir / "train" / "cat" / "b.png", 16, 12, 3, 204);  // colour: every sample in RGB
  write_constant(dir / "train" / "cat" / "c.PNG", 4, 3, 1, 102);
  write_constant(dir / "test" / "dog" / "d.png", 20, 20, 1, 153);
  std::ofstream(dir / "train" / "cat" / "notes.txt") << "not an image";
  const cpudl::data::Dataset train = cpudl::data::load_dataset(dir, true);
  EXPECT_EQ(train.kind, "image_folder");
  EXPECT_EQ(train.class_names, (std::vector<std::string>{"cat", "dog"}));  // sorted, as torchvision's
  ASSERT_EQ(train.images.shape(),
            (cpudl::Shape{3, 3, 16, 12}));  // cat/b, cat/c, dog/a: b's size (first in order)
  const float expected[] = {204, 102, 51};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(train.labels.data_as<std::int64_t>()[i], i < 2 ? 0 : 1);
    for (std::int64_t k = 0; k < 3 * 16 * 12; ++k)  // constant images stay constant through resizing
      ASSERT_NEAR(train.images.data()[i * 3 * 16 * 12 + k], (expected[i] / 255.0f - 0.5f) / 0.5f, 1e-5) << i;
  }
  const cpudl::data::Dataset test = cpudl::data::load_dataset(dir, false);
  EXPECT_EQ(test.images.shape(), (cpudl::Shape{1, 3, 16, 12}));  // the training split's shape
  EXPECT_EQ(test.labels.data_as<std::int64_t>()[0], 1);
  EXPECT_EQ(cpudl::data::load_dataset(dir, false, {1, 28, 28}).images.shape(), (cpudl::Shape{1, 1, 28, 28}));
  EXPECT_TRUE(cpudl::data::has_test_split(dir));
  EXPECT_FALSE(cpudl::data::has_test_split(dir / "train"));
  write_constant(dir / "test" / "bird" / "e.png", 4, 4, 1, 0);
  EXPECT_THROW(cpudl::data::load_dataset(dir, false), cpudl::Error);  // a class training never saw
  fs::remove_all(dir);
}

// train -> eval -> predict -> export on an image folder made of the tiny MNIST set's digits, in
// three classes, as PNG, JPEG-free PGM and enlarged PNG files.
TEST_F(ImageFolderCli, TrainsEvaluatesPredictsAndExportsWithClassNames) {
  const std::string images = slurp(kTiny + "/train-images-idx3-ubyte"),
                    labels = slurp(kTiny + "/train-labels-idx1-ubyte");
  const std::map<int, std::string> names = {{0, "zero"}, {1, "one"}, {7, "seven"}};
  int written = 0;
  for (std::size_t i = 0; 8 + i < labels.size(); ++i) {
    const auto it = names.find(static_cast<unsigned char>(labels[8 + i]));
    if (it == names.end()) continue;
    cpudl::data::DecodedImage img{1, 28, 28, std::vector<float>(784)};
    for (int k = 0; k < 784; ++k)
      img.values[static_cast<std::size_t>(k)] = static_cast<unsigned char>(images[16 + i * 784 + k]) / 255.0f;
    const fs::path file =
        dir / "digits" / (written % 4 == 0 ? "test" : "train") / it->second / (std::to_string(i) + ".png");
    fs::create_directories(file.parent_path());
    write_png(file, img);
    ++written;
  }
  ASSERT_GT(written, 20);
  const auto trained = run("train --model lenet5 --data " + path("digits") +
                           " --epochs 4 --batch 16 --lr 0.003 --out " + path("m.safetensors"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const auto md = cpudl::io::load_safetensors(path("m.safetensors")).metadata;
  EXPECT_EQ(md.at("class_names"), R"(["one","seven","zero"])");
  EXPECT_EQ(md.at("classes"), "3");

  const auto evaluated = run("eval --json --model " + path("m.safetensors") + " --data " + path("digits"));
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
  const auto e = nlohmann::json::parse(evaluated.out);
  std::int64_t test_files = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir / "digits" / "test"))
    test_files += f.is_regular_file();
  EXPECT_EQ(e["samples"], test_files);
  EXPECT_GT(e["accuracy"].get<double>(), 0.5);  // three classes of clear strokes

  const auto predicted = run("predict --json --model " + path("m.safetensors") + " " + path("digits/test"));
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  const auto p = nlohmann::json::parse(predicted.out);
  ASSERT_EQ(static_cast<std::int64_t>(p.size()), test_files);
  int right = 0;
  for (const auto& entry : p) {
    const std::string label = entry["top"][0]["label"];
    EXPECT_TRUE(label == "one" || label == "seven" || label == "zero") << label;
    right += entry["input"].get<std::string>().find("/" + label + "/") != std::string::npos;
  }
  EXPECT_NEAR(right / static_cast<double>(test_files), e["accuracy"].get<double>(), 1e-9);  // eval agrees

  // The exported file carries the names: serve answers with them.
  ASSERT_EQ(run("export " + path("m.safetensors") + " " + path("m.onnx")).exit_code, 0);
  cpudl::InferenceSession s(path("m.onnx"));
  EXPECT_EQ(s.metadata().at("cpudl.class_names"), R"(["one","seven","zero"])");

  // The training folder alone has no test split: --val-split holds one out.
  const auto no_split = run("train --model lenet5 --data " + path("digits/train") + " --epochs 1 --out " +
                            path("n.safetensors"));
  EXPECT_EQ(no_split.exit_code, 2);
  EXPECT_NE(no_split.err.find("give --val-split 0.1"), std::string::npos) << no_split.err;
  const auto split = run("train --model lenet5 --data " + path("digits/train") +
                         " --epochs 1 --val-split 0.25 --out " + path("n.safetensors"));
  EXPECT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(run("train --model lenet5 --data " + path("digits/train") + " --val-split 0.95 --out " +
                path("n.safetensors"))
                .exit_code,
            2);
}

}  // namespace
