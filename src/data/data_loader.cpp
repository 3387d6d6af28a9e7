// The DataLoader: a seeded permutation per epoch, batches gathered (and augmented) by one
// background thread into a two-slot queue, so loading overlaps the training step. One thread
// suffices: gathering a batch is memory copies, far cheaper than the step it overlaps, and a
// second loader thread would only contend with the compute pool for the cores.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>

#include "cpudl/data.h"
#include "cpudl/error.h"

namespace cpudl::data {

struct DataLoader::State {
  const Dataset& data;
  LoaderOptions options;
  std::int64_t n = 0, sample_floats = 0;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<Tensor, Tensor>> ready;
  bool epoch_done = true, stop = false;
  std::thread worker;

  State(const Dataset& d, const LoaderOptions& o) : data(d), options(o) {}

  // Copies samples order[begin, end) into a batch, applying augmentation with `gen`.
  std::pair<Tensor, Tensor> gather(const std::vector<std::int64_t>& order, std::int64_t begin, std::int64_t end, Generator& gen) {
    Shape xs = data.images.shape();
    xs[0] = end - begin;
    Tensor x = Tensor::empty(xs), y = Tensor::empty({end - begin}, DType::i64);
    const float* src = data.images.data();
    const auto* labels = data.labels.data_as<std::int64_t>();
    const bool image = xs.size() == 4;
    const std::int64_t c = image ? xs[1] : 1, h = image ? xs[2] : 1, w = image ? xs[3] : sample_floats;
    for (std::int64_t b = 0; b < end - begin; ++b) {
      const std::int64_t i = order[static_cast<std::size_t>(begin + b)];
      y.data_as<std::int64_t>()[b] = labels[i];
      float* dst = x.data() + b * sample_floats;
      const float* s = src + i * sample_floats;
      if (!image || (options.crop_padding == 0 && !options.horizontal_flip)) {
        std::memcpy(dst, s, static_cast<std::size_t>(sample_floats) * sizeof(float));
        continue;
      }
      const std::int64_t p = options.crop_padding;
      const std::int64_t dy = p ? static_cast<std::int64_t>(gen.next_u64() % static_cast<std::uint64_t>(2 * p + 1)) - p : 0;
      const std::int64_t dx = p ? static_cast<std::int64_t>(gen.next_u64() % static_cast<std::uint64_t>(2 * p + 1)) - p : 0;
      const bool flip = options.horizontal_flip && (gen.next_u64() & 1);
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t r = 0; r < h; ++r)
          for (std::int64_t q = 0; q < w; ++q) {
            const std::int64_t sr = r + dy, sq = (flip ? w - 1 - q : q) + dx;
            dst[(ch * h + r) * w + q] = (sr < 0 || sr >= h || sq < 0 || sq >= w) ? 0.0f : s[(ch * h + sr) * w + sq];
          }
    }
    return {x, y};
  }

  void run_epoch(std::int64_t epoch, std::int64_t skip) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    Generator shuffle(options.seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch) + 1);
    if (options.shuffle)
      for (std::int64_t i = n - 1; i > 0; --i)
        std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(shuffle.next_u64() % static_cast<std::uint64_t>(i + 1))]);
    Generator augment(options.seed * 31 + static_cast<std::uint64_t>(epoch) * 1000003 + 7);
    const std::int64_t batches = batches_per_epoch();
    for (std::int64_t b = 0; b < batches; ++b) {
      const std::int64_t begin = b * options.batch, end = std::min(n, begin + options.batch);
      // Augmentation draws are made for skipped batches too, so a resumed epoch matches.
      auto batch = gather(order, begin, end, augment);
      if (b < skip) continue;
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return ready.size() < 2 || stop; });
      if (stop) return;
      ready.push_back(std::move(batch));
      changed.notify_all();
    }
    std::lock_guard<std::mutex> lock(mutex);
    epoch_done = true;
    changed.notify_all();
  }

  std::int64_t batches_per_epoch() const {
    return options.drop_last ? n / options.batch : (n + options.batch - 1) / options.batch;
  }

  void join() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
      changed.notify_all();
    }
    if (worker.joinable()) worker.join();
    std::lock_guard<std::mutex> lock(mutex);
    stop = false;
    ready.clear();
  }
};

DataLoader::DataLoader(const Dataset& dataset, const LoaderOptions& options) : state_(std::make_unique<State>(dataset, options)) {
  if (options.batch < 1) throw Error("batch size must be at least 1, got " + std::to_string(options.batch));
  state_->n = dataset.images.size(0);
  if (state_->n == 0) throw Error("the dataset is empty");
  if (dataset.labels.numel() != state_->n) throw Error("dataset has " + std::to_string(state_->n) + " samples but " + std::to_string(dataset.labels.numel()) + " labels");
  state_->sample_floats = dataset.images.numel() / state_->n;
}

DataLoader::~DataLoader() { state_->join(); }

std::int64_t DataLoader::batches_per_epoch() const { return state_->batches_per_epoch(); }

void DataLoader::start_epoch(std::int64_t epoch, std::int64_t skip) {
  state_->join();
  state_->epoch_done = false;
  State* s = state_.get();
  state_->worker = std::thread([s, epoch, skip] { s->run_epoch(epoch, skip); });
}

bool DataLoader::next(Tensor& x, Tensor& y) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->changed.wait(lock, [&] { return !state_->ready.empty() || state_->epoch_done; });
  if (state_->ready.empty()) return false;
  x = std::move(state_->ready.front().first);
  y = std::move(state_->ready.front().second);
  state_->ready.pop_front();
  state_->changed.notify_all();
  return true;
}

}  // namespace cpudl::data
