// `cpudl train`, `eval` and `predict` end to end on tests/golden/mnist_tiny (a PyTorch-made
// MNIST-format set): PyTorch's per-step losses, crash-safe resume, and every kind of bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_sandbox.h"
#include "cpudl/autograd.h"
#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/io.h"
#include "cpudl/ops.h"
#include "named_tensors.h"
#include "train/trainer.h"

namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(CPUDL_FIXTURES_DIR) + "/../golden/mnist_tiny";

using Result = cpudl::testing::CliResult;
using cpudl::testing::slurp;
using TrainCli = cpudl::testing::CliSandbox;

TEST_F(TrainCli, PerStepLossesFollowPyTorchFromItsInitialWeights) {
  const Result r =
      run("train --model simplecnn --data " + kTiny + " --init " + kTiny +
          "/simplecnn_init.safetensors --no-shuffle --batch 32 --epochs 1 --json --log-every 1 --out " +
          path("m.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto reference = nlohmann::json::parse(slurp(kTiny + "/pytorch_losses.json"))["losses"];
  std::istringstream lines(r.out);
  std::vector<double> losses;
  bool summary = false;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step")) losses.push_back(j["loss"].get<double>());
    if (j.contains("summary")) {
      summary = true;
      for (const char* key : {"test_accuracy", "images_per_second", "seconds_per_epoch", "peak_memory_bytes"})
        EXPECT_TRUE(j.contains(key)) << key;
    }
  }
  EXPECT_TRUE(summary);
  ASSERT_EQ(losses.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i)
    EXPECT_NEAR(losses[i], reference[i].get<double>(), 1e-3) << "step " << i + 1;
}

TEST_F(TrainCli, ResumeAfterSigtermGivesTheUninterruptedResult) {
  const std::string common = "train --model lenet5 --data " + kTiny +
                             " --batch 64 --epochs 2 --seed 3 --optimizer sgd --lr 0.05 --momentum 0.9";
  ASSERT_EQ(run(common + " --out " + path("full.safetensors")).exit_code, 0);
  const Result stopped = run(common + " --out " + path("resumed.safetensors") + " --stop-after 13");
  EXPECT_EQ(stopped.exit_code, 143) << stopped.err;  // 128 + SIGTERM
  EXPECT_NE(stopped.err.find("resume with --resume"), std::string::npos) << stopped.err;
  EXPECT_FALSE(fs::exists(path("resumed.safetensors")));  // the model is not final
  ASSERT_TRUE(fs::exists(path("resumed.safetensors.ckpt")));
  // The checkpoint holds the run's settings: a flag that changes one is refused, naming both values
  // (it used to be ignored without a word), and so is an end already passed (epoch 2 of 2 is in
  // progress: --epochs 1 would train nothing and save the model as if it had).
  for (const auto& [flags, expected] : std::vector<std::pair<std::string, std::string>>{
           {" --lr 0.5", "--lr 0.500000 differs from the checkpoint's 0.050000"},
           {" --model simplecnn", "--model simplecnn differs from the checkpoint's lenet5"},
           {" --batch 32", "--batch 32 differs from the checkpoint's 64"},
           {" --epochs 1",
            "finished epoch 1 and --epochs is 1: nothing is left to train; give --epochs 2"}}) {
    const Result refused = run("train --data " + kTiny + " --resume " + path("resumed.safetensors.ckpt") +
                               " --out " + path("x.safetensors") + flags);
    EXPECT_EQ(refused.exit_code, 2) << flags;
    EXPECT_NE(refused.err.find(expected), std::string::npos) << flags << ": " << refused.err;
    EXPECT_FALSE(fs::exists(path("x.safetensors")));
  }
  // The checkpoint holds the model as of step 13: eval takes it as a model file (it printed a
  // state-dict diff), and its answer is that of the model at step 13.
  const Result judged = run("eval --json --model " + path("resumed.safetensors.ckpt") + " --data " + kTiny);
  ASSERT_EQ(judged.exit_code, 0) << judged.err;
  const double accuracy_at_13 = nlohmann::json::parse(judged.out)["accuracy"].get<double>();
  EXPECT_GT(accuracy_at_13, 0.3);  // 13 steps of SGD on lenet5 get well above chance (0.1)
  // --resume alone continues the run to its own --epochs (2), repeating a setting is fine.
  const Result resumed = run("train --data " + kTiny + " --lr 0.05 --resume " +
                             path("resumed.safetensors.ckpt") + " --out " + path("resumed.safetensors"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("trained lenet5 ("), std::string::npos) << resumed.out;  // not the default
  EXPECT_FALSE(fs::exists(path("resumed.safetensors.ckpt")))
      << "a run that ended well removes its checkpoint";
  const auto a = cpudl::io::load_safetensors(path("full.safetensors")),
             b = cpudl::io::load_safetensors(path("resumed.safetensors"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    const auto va = a.tensors[i].second.dtype() == cpudl::DType::f32 ? a.tensors[i].second.to_vector()
                                                                     : std::vector<float>{};
    const auto vb = b.tensors[i].second.dtype() == cpudl::DType::f32 ? b.tensors[i].second.to_vector()
                                                                     : std::vector<float>{};
    for (std::size_t k = 0; k < va.size(); ++k)
      ASSERT_NEAR(va[k], vb[k], 1e-6) << a.tensors[i].first << " element " << k;
  }
}

// The first checkpoint names its file and size; --keep-checkpoint keeps it after the run, and the
// kept checkpoint is, for eval and predict, the model the run saved.
TEST_F(TrainCli, KeptCheckpointIsTheSavedModelForEvalAndPredict) {
  const Result r = run("train --model lenet5 --data " + kTiny +
                       " --epochs 1 --batch 64 --keep-checkpoint --out " + path("m.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ckpt = path("m.safetensors.ckpt");
  ASSERT_TRUE(fs::exists(ckpt));
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MB", static_cast<double>(fs::file_size(ckpt)) / 1e6);
  EXPECT_NE(r.err.find("checkpoint " + ckpt + " (" + size + ", kept when the run ends well)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("kept the checkpoint " + ckpt), std::string::npos) << r.out;
  const Result of_model = run("eval --json --model " + path("m.safetensors") + " --data " + kTiny),
               of_ckpt = run("eval --json --model " + ckpt + " --data " + kTiny);
  ASSERT_EQ(of_model.exit_code, 0) << of_model.err;
  ASSERT_EQ(of_ckpt.exit_code, 0) << of_ckpt.err;
  EXPECT_EQ(of_ckpt.out, of_model.out);  // accuracy, loss and confusion, digit for digit
  const std::string sample = " idx:" + kTiny + "/t10k-images-idx3-ubyte:7";
  const Result p_model = run("predict --json --top 10 --model " + path("m.safetensors") + sample),
               p_ckpt = run("predict --json --top 10 --model " + ckpt + sample);
  ASSERT_EQ(p_ckpt.exit_code, 0) << p_ckpt.err;
  EXPECT_EQ(p_ckpt.out, p_model.out);
  // Without the flag, the announcement says it goes, and it does.
  const Result plain = run("train --model lenet5 --data " + kTiny + " --epochs 1 --batch 64 --json --out " +
                           path("n.safetensors"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("removed when the run ends well; --keep-checkpoint keeps it"), std::string::npos)
      << plain.out;
  EXPECT_FALSE(fs::exists(path("n.safetensors.ckpt")));
  std::istringstream lines(plain.out);
  std::string last, line;
  while (std::getline(lines, line)) last = line;
  EXPECT_EQ(nlohmann::json::parse(last)["checkpoint"], "") << last;
}

TEST_F(TrainCli, BadInputGivesOneClearLineAndKeepsPreviousFiles) {
  std::ofstream(path("keep.safetensors")) << "previous model";
  fs::create_directories(dir / "bad");
  fs::copy(kTiny + "/t10k-labels-idx1-ubyte", dir / "bad");
  fs::copy(kTiny + "/t10k-images-idx3-ubyte", dir / "bad");
  fs::copy(kTiny + "/train-labels-idx1-ubyte", dir / "bad");
  std::string images = slurp(kTiny + "/train-images-idx3-ubyte");
  images[2] = 0x0d;  // wrong magic
  std::ofstream(dir / "bad" / "train-images-idx3-ubyte", std::ios::binary) << images;
  const struct {
    std::string args, expected;
    int code;
  } cases[] = {
      {"train --data " + path("nowhere") + " --out " + path("keep.safetensors"), "no such data directory", 1},
      {"train --data " + path("bad") + " --out " + path("keep.safetensors"),
       "train-images-idx3-ubyte: not an unsigned-byte IDX file", 1},
      {"train --data " + kTiny + " --out " + path("no/such/dir/m.safetensors"), "cannot write into", 1},
      {"train --data " + kTiny + " --model vgg --out " + path("keep.safetensors"), "vgg", 2},
      {"train --data " + kTiny + " --epochs 0 --out " + path("keep.safetensors"), "--epochs", 2},
      {"train --data " + kTiny + " --resume " + path("keep.safetensors") + " --out " +
           path("new.safetensors"),
       "truncated or not safetensors", 1},
      // The model file may not replace what the run resumes from (NoCommandWritesOverItsInput).
      {"train --data " + kTiny + " --resume " + path("keep.safetensors") + " --out " +
           path("keep.safetensors"),
       "is the same file as the input", 2},
      {"train --data " + kTiny + " --init " + kTiny + "/simplecnn_init.safetensors --model lenet5 --out " +
           path("keep.safetensors"),
       "missing: conv2.weight", 1},
      {"eval --model " + path("keep.safetensors") + " --data " + kTiny, "truncated or not safetensors", 1},
      {"predict --model " + path("keep.safetensors"), "inputs", 2},
  };
  for (const auto& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.exit_code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n') <= 4, true)
        << r.err;  // one line (+ usage for code 2)
  }
  EXPECT_EQ(slurp(path("keep.safetensors")), "previous model");
}

// A minimal PNG writer for the test: one IDAT, filter 0 on every row.
std::string png(int w, int h, int channels, const std::vector<unsigned char>& pixels) {
  auto be = [](std::uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                       static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    const std::string td = type + data;
    return be(static_cast<std::uint32_t>(data.size())) + td +
           be(static_cast<std::uint32_t>(
               crc32(0, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()))));
  };
  std::string raw;
  for (int y = 0; y < h; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(&pixels[static_cast<std::size_t>(y * w * channels)]),
               static_cast<std::size_t>(w * channels));
  }
  uLongf len = compressBound(raw.size());
  std::string z(len, '\0');
  compress(reinterpret_cast<Bytef*>(z.data()), &len, reinterpret_cast<const Bytef*>(raw.data()), raw.size());
  z.resize(len);
  const char colour = channels == 1 ? 0 : 2;
  return std::string("\x89PNG\r\n\x1a\n", 8) +
         chunk("IHDR", be(static_cast<std::uint32_t>(w)) + be(static_cast<std::uint32_t>(h)) +
                           std::string{8, colour, 0, 0, 0}) +
         chunk("IDAT", z) + chunk("IEND", "");
}

TEST_F(TrainCli, EvalAndPredictReadTheModelFileAlone) {
  ASSERT_EQ(
      run("train --model lenet5 --data " + kTiny + " --epochs 2 --batch 32 --out " + path("m.safetensors"))
          .exit_code,
      0);
  const Result e = run("eval --json --model " + path("m.safetensors") + " --data " + kTiny);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto j = nlohmann::json::parse(e.out);
  EXPECT_GT(j["accuracy"].get<double>(), 0.5);  // the strokes are easy to learn
  std::int64_t total = 0;
  for (const auto& row : j["confusion"])
    for (const auto& v : row) total += v.get<std::int64_t>();
  EXPECT_EQ(total, 64);

  // The same image as IDX sample, PGM and PNG (grey and RGB) gets the same prediction.
  const std::string idx = slurp(kTiny + "/t10k-images-idx3-ubyte");
  std::vector<unsigned char> pixels(idx.begin() + 16, idx.begin() + 16 + 784), rgb;
  for (unsigned char p : pixels) rgb.insert(rgb.end(), {p, p, p});
  std::ofstream(path("a.pgm"), std::ios::binary) << "P5\n# test\n28 28\n255\n"
                                                 << std::string(pixels.begin(), pixels.end());
  std::ofstream(path("a.png"), std::ios::binary) << png(28, 28, 1, pixels);
  std::ofstream(path("rgb.png"), std::ios::binary) << png(28, 28, 3, rgb);
  std::ofstream(path("small.pgm"), std::ios::binary) << "P5 4 4 255\n" << std::string(16, '\x10');
  const Result p =
      run("predict --json --model " + path("m.safetensors") + " idx:" + kTiny + "/t10k-images-idx3-ubyte:0 " +
          path("a.pgm") + " " + path("a.png") + " " + path("rgb.png"));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto preds = nlohmann::json::parse(p.out);
  ASSERT_EQ(preds.size(), 4u);
  for (const auto& pr : preds) {
    EXPECT_EQ(pr["top"][0]["class"], preds[0]["top"][0]["class"]) << pr.dump();
    EXPECT_NEAR(pr["top"][0]["probability"].get<double>(), preds[0]["top"][0]["probability"].get<double>(),
                1e-2);
  }
  // Images of other sizes are resized (antialiased bilinear, ImageResize.MatchesPyTorchs...): the
  // digit at twice the size, in colour, gets the 28 x 28 grey digit's class.
  std::vector<unsigned char> big;
  for (int y = 0; y < 56; ++y)
    for (int x = 0; x < 56; ++x)
      big.insert(big.end(), 3, pixels[static_cast<std::size_t>(y / 2 * 28 + x / 2)]);
  std::ofstream(path("big.png"), std::ios::binary) << png(56, 56, 3, big);
  const Result resized =
      run("predict --json --top 10 --model " + path("m.safetensors") + " " + path("big.png"));
  ASSERT_EQ(resized.exit_code, 0) << resized.err;
  const auto r = nlohmann::json::parse(resized.out)[0]["top"];
  EXPECT_EQ(r[0]["class"], preds[0]["top"][0]["class"]) << r.dump();
  {  // what the CLI computed is the model on resize_image's 28 x 28 (luminance of equal RGB: the grey)
    const cpudl::train::ModelFile m = cpudl::train::load_model_file(path("m.safetensors"));
    const cpudl::Tensor x =
        cpudl::train::prepare_image(m, cpudl::data::read_image(path("big.png")), "big.png");
    cpudl::NoGradGuard no_grad;
    const cpudl::Tensor probs = cpudl::softmax(m.model->forward(x.unsqueeze(0)), 1);
    for (const auto& entry : r)
      EXPECT_NEAR(entry["probability"].get<double>(), probs.at({0, entry["class"].get<std::int64_t>()}),
                  1e-6);
    const cpudl::Tensor small_grey =
        cpudl::data::resize_image(cpudl::data::read_image(path("big.png")), 28, 28);
    EXPECT_EQ(small_grey.shape(), (cpudl::Shape{3, 28, 28}));
  }
  const Result small = run("predict --model " + path("m.safetensors") + " " + path("small.pgm"));
  EXPECT_EQ(small.exit_code, 0) << small.err;  // 4 x 4, enlarged

  // Several inputs: a missing and a corrupt file are reported, the others still predicted, and the
  // exit code says something failed.
  std::ofstream(path("broken.png"), std::ios::binary) << png(28, 28, 1, pixels).substr(0, 60);
  const Result some = run("predict --json --model " + path("m.safetensors") + " " + path("a.png") + " " +
                          path("missing.png") + " " + path("broken.png") + " " + path("a.pgm"));
  EXPECT_EQ(some.exit_code, 1);
  EXPECT_NE(some.err.find("missing.png: cannot open"), std::string::npos) << some.err;
  EXPECT_NE(some.err.find("broken.png: corrupt PNG"), std::string::npos) << some.err;
  EXPECT_NE(some.err.find("2 of 4 inputs could not be predicted"), std::string::npos) << some.err;
  const auto partial = nlohmann::json::parse(some.out);
  ASSERT_EQ(partial.size(), 4u);
  EXPECT_EQ(partial[0]["top"], preds[2]["top"]);
  EXPECT_TRUE(partial[1].contains("error"));
  EXPECT_TRUE(partial[2].contains("error"));
  EXPECT_EQ(partial[3]["top"], preds[1]["top"]);

  // A digit drawn dark on light: a warning names the polarity; --invert gives the original's answer.
  std::vector<unsigned char> negative;
  for (unsigned char v : pixels) negative.push_back(static_cast<unsigned char>(255 - v));
  std::ofstream(path("negative.png"), std::ios::binary) << png(28, 28, 1, negative);
  const Result warned = run("predict --json --model " + path("m.safetensors") + " " + path("negative.png"));
  ASSERT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_NE(warned.err.find("negative.png is mostly light"), std::string::npos) << warned.err;
  EXPECT_NE(warned.err.find("--invert"), std::string::npos) << warned.err;
  EXPECT_EQ(run("predict --model " + path("m.safetensors") + " " + path("a.png")).err, "");  // no warning
  const Result inverted =
      run("predict --json --top 10 --model " + path("m.safetensors") + " --invert " + path("negative.png"));
  ASSERT_EQ(inverted.exit_code, 0) << inverted.err;
  EXPECT_EQ(inverted.err, "");
  const auto inv = nlohmann::json::parse(inverted.out)[0]["top"];
  const auto orig = nlohmann::json::parse(
      run("predict --json --top 10 --model " + path("m.safetensors") + " " + path("a.png")).out)[0]["top"];
  ASSERT_EQ(inv.size(), orig.size());
  for (std::size_t k = 0; k < inv.size(); ++k)
    EXPECT_NEAR(inv[k]["probability"].get<double>(), orig[k]["probability"].get<double>(), 1e-5);
}

TEST_F(TrainCli, CsvAndCifarDirectoriesTrain) {
  fs::create_directories(dir / "csv");
  std::ofstream train(dir / "csv" / "train.csv"), test(dir / "csv" / "test.csv");
  train << "x0,x1,label\n";
  for (int i = 0; i < 200; ++i) {
    const double a = (i % 17) / 17.0, b = (i % 13) / 13.0;
    train << a << "," << b << "," << (a > b ? 1 : 0) << "\n";
    if (i < 40) test << b << "," << a << "," << (b > a ? 1 : 0) << "\n";
  }
  train.close(), test.close();
  const Result csv = run("train --model mlp --data " + path("csv") + " --epochs 3 --batch 20 --json --out " +
                         path("csv.safetensors"));
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_NE(csv.out.find("\"summary\":true"), std::string::npos);
  std::ofstream(dir / "csv" / "train.csv", std::ios::app) << "0.5,oops,1\n";
  const Result bad = run("train --model mlp --data " + path("csv") + " --out " + path("csv.safetensors"));
  EXPECT_NE(bad.err.find("train.csv:202: column 2 ('oops') is not a number"), std::string::npos) << bad.err;

  fs::create_directories(dir / "cifar");
  std::string records;
  for (int i = 0; i < 20; ++i) {
    records += static_cast<char>(i % 10);
    records += std::string(3072, static_cast<char>(i * 12));
  }
  for (const char* f : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                        "data_batch_5.bin", "test_batch.bin"})
    std::ofstream(dir / "cifar" / f, std::ios::binary) << records;
  const Result cifar = run("train --model mlp --data " + path("cifar") + " --epochs 1 --batch 50 --out " +
                           path("cifar.safetensors"));
  ASSERT_EQ(cifar.exit_code, 0) << cifar.err;
  const Result wrong =
      run("train --model simplecnn --data " + path("cifar") + " --out " + path("cifar.safetensors"));
  EXPECT_NE(wrong.err.find("takes 28x28 images; the data's images are 32x32"), std::string::npos)
      << wrong.err;
}

}  // namespace

namespace {

using cpudl::testing::worst_relative_difference;

TEST_F(TrainCli, AccumulatedMicroBatchesGiveTheFullBatchsStep) {
  const std::string common = "train --model simplecnn --data " + kTiny + " --init " + kTiny +
                             "/simplecnn_init.safetensors --no-shuffle --batch 32 --epochs 1 --threads 1";
  ASSERT_EQ(run(common + " --out " + path("full.safetensors")).exit_code, 0);
  const Result r = run(common + " --accumulate 4 --out " + path("micro.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // four backward passes of 8 images summed against one of 32: float rounding only
  EXPECT_LT(worst_relative_difference(path("full.safetensors"), path("micro.safetensors")), 1e-4);
  const Result bad = run(common + " --accumulate 3 --out " + path("bad.safetensors"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--accumulate 3 does not divide --batch 32"), std::string::npos) << bad.err;
}

TEST_F(TrainCli, MaxMemoryPicksMicroBatchesThatFitOrSaysWhatWould) {
  // LeNet-5 on the tiny set holds about 4 MiB of tensors before any activation and some 25 KiB per
  // sample: 5 MiB leaves room for half of a batch of 64.
  const std::string common =
      "train --model lenet5 --data " + kTiny + " --no-shuffle --batch 64 --epochs 1 --threads 1";
  const Result r = run(common + " --max-memory 5M --out " + path("guarded.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.err.find("(--accumulate ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const int k = std::stoi(r.err.substr(at + 14));
  EXPECT_GT(k, 1) << r.err;
  // The plan is an --accumulate: the same weights as asking for it.
  ASSERT_EQ(
      run(common + " --accumulate " + std::to_string(k) + " --out " + path("asked.safetensors")).exit_code,
      0);
  EXPECT_EQ(worst_relative_difference(path("guarded.safetensors"), path("asked.safetensors")), 0.0);
  const Result small = run(common + " --max-memory 1M --out " + path("small.safetensors"));
  EXPECT_EQ(small.exit_code, 2);
  EXPECT_NE(small.err.find("--max-memory 1.0 MiB is below what the run holds before any activation"),
            std::string::npos)
      << small.err;
  EXPECT_FALSE(std::filesystem::exists(path("small.safetensors")));
  const Result bad = run(common + " --max-memory 2X --out " + path("bad.safetensors"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--max-memory 2X: expected a size"), std::string::npos) << bad.err;
}

TEST_F(TrainCli, CheckpointActivationsNeedsAModelWithLayerGroups) {
  // (resnet18's checkpointed gradients equal plain autograd's: tests/nn/checkpoint_test.cpp)
  const Result r = run("train --model lenet5 --data " + kTiny +
                       " --epochs 1 --checkpoint-activations --out " + path("m.safetensors"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--checkpoint-activations: lenet5 has no layer groups to recompute"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("m.safetensors")));
}

TEST_F(TrainCli, Bf16TrainingFollowsFp32OrSaysWhyItCannot) {
  // mlp: its linear layers run on oneDNN's bf16 products (simplecnn's one-channel convolution and
  // narrow classifier stay on cpudl's f32 kernels, so bf16 would change nothing there).
  const std::string common =
      "train --model mlp --data " + kTiny + " --no-shuffle --batch 32 --epochs 2 --threads 2 --json";
  // Capped below the bf16 units, the flag is refused with one line on any machine.
  const Result capped =
      run(common + " --precision bf16 --out " + path("capped.safetensors"), "CPUDL_ISA=avx2");
  EXPECT_EQ(capped.exit_code, 2);
  EXPECT_NE(capped.err.find("--precision bf16: this CPU has neither AVX512-BF16 nor AMX"), std::string::npos)
      << capped.err;
  try {
    cpudl::Bf16Autocast probe;
  } catch (const cpudl::Error&) {
    GTEST_SKIP()
        << "this CPU has neither AVX512-BF16 nor AMX: bf16 training runs on Zen 4, Sapphire Rapids and later";
  }
  const Result fp32 = run(common + " --out " + path("fp32.safetensors"));
  const Result bf16 = run(common + " --precision bf16 --out " + path("bf16.safetensors"));
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  auto last_epoch = [](const std::string& out) {
    nlohmann::json last;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (auto j = nlohmann::json::parse(line); j.contains("test_accuracy") && !j.contains("summary"))
        last = j;
    return last;
  };
  const auto a = last_epoch(fp32.out), b = last_epoch(bf16.out);
  // bf16 rounds inputs and weights to 8 bits of mantissa: the run follows fp32's closely, not exactly
  EXPECT_NEAR(b["loss"].get<double>(), a["loss"].get<double>(), 0.05 * a["loss"].get<double>() + 0.02);
  EXPECT_NEAR(b["test_accuracy"].get<double>(), a["test_accuracy"].get<double>(), 0.05);
  EXPECT_GT(worst_relative_difference(path("fp32.safetensors"), path("bf16.safetensors")), 1e-6)
      << "bf16 changed nothing: was it applied?";
}

}  // namespace
