// Trains the PyTorch tutorial's SimpleCNN on MNIST with cpudl's C++ API, the way the Python
// tutorial does: Adam, lr 1e-3, batch 256. Data: scripts/fetch-mnist.sh writes data/mnist/.
//   build/examples/train_mnist [data/mnist] [epochs]
#include <chrono>
#include <cstdio>
#include <string>

#include "cpudl/cpudl.h"

using namespace cpudl;

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int epochs = argc > 2 ? std::stoi(argv[2]) : 1;
  const data::Dataset train = data::load_mnist(dir, true), test = data::load_mnist(dir, false);
  manual_seed(0);
  auto model = nn::make_model("simplecnn");
  optim::Adam optimizer(model->parameters(), optim::AdamOptions{});
  const std::int64_t batch = 256, n = train.images.size(0);

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    model->train();
    const auto start = std::chrono::steady_clock::now();
    double total_loss = 0;
    for (std::int64_t i = 0; i < n; i += batch) {
      const Tensor x = train.images.slice(0, i, i + batch), y = train.labels.slice(0, i, i + batch);
      optimizer.zero_grad();
      Tensor loss = cross_entropy(model->forward(x), y);
      loss.backward();
      optimizer.step();
      total_loss += loss.item() * static_cast<double>(x.size(0));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    model->eval();
    NoGradGuard no_grad;
    const Tensor predicted = argmax(model->forward(test.images), 1);
    std::int64_t correct = 0;
    for (std::int64_t i = 0; i < test.labels.numel(); ++i)
      correct += predicted.data_as<std::int64_t>()[i] == test.labels.data_as<std::int64_t>()[i];
    std::printf("epoch %d: loss %.4f, test accuracy %.2f%%, %.0f images/s\n", epoch,
                total_loss / static_cast<double>(n),
                100.0 * static_cast<double>(correct) / static_cast<double>(test.labels.numel()),
                static_cast<double>(n) / seconds);
  }
  io::save_safetensors("simplecnn.safetensors", model->state_dict(), {{"architecture", "simplecnn"}});
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_mnist: %s\n", e.what());
  return 1;
}
