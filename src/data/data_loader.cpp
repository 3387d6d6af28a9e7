// The DataLoader: a seeded permutation per epoch; batches gathered (and augmented) by `workers`
// background threads, worker k taking batches k, k + W, ..., delivered in order from a bounded
// window of 2W batches, so loading overlaps the training step. Augmentation draws come from a
// generator seeded per (seed, epoch, batch): results depend on neither the worker count nor on
// where a resumed epoch starts. One worker is the default: gathering a batch is memory copies,
// far cheaper than the step it overlaps, and more threads would contend with the compute pool.
#include <condition_variable>
#include <cstring>
#include <map>
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
  std::map<std::int64_t, std::pair<Tensor, Tensor>> ready;  // by batch index
  std::int64_t next_batch = 0, end_batch = 0;               // what next() returns, and the epoch's end
  bool stop = false;
  std::vector<std::thread> workers;
  std::vector<std::int64_t> order;

  State(const Dataset& d, const LoaderOptions& o) : data(d), options(o) {}

  std::int64_t batches_per_epoch() const {
    return options.drop_last ? n / options.batch : (n + options.batch - 1) / options.batch;
  }

  std::pair<Tensor, Tensor> gather(std::int64_t batch_index, std::int64_t epoch) {
    const std::int64_t begin = batch_index * options.batch, end = std::min(n, begin + options.batch);
    Generator gen(options.seed * 0x2545F4914F6CDD1Dull + static_cast<std::uint64_t>(epoch) * 1000003ull +
                  static_cast<std::uint64_t>(batch_index) * 7919ull + 7);
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
      const std::int64_t dy =
          p ? static_cast<std::int64_t>(gen.next_u64() % static_cast<std::uint64_t>(2 * p + 1)) - p : 0;
      const std::int64_t dx =
          p ? static_cast<std::int64_t>(gen.next_u64() % static_cast<std::uint64_t>(2 * p + 1)) - p : 0;
      const bool flip = options.horizontal_flip && (gen.next_u64() & 1);
      for (std::int64_t ch = 0; ch < c; ++ch)
        for (std::int64_t r = 0; r < h; ++r)
          for (std::int64_t q = 0; q < w; ++q) {
            const std::int64_t sr = r + dy, sq = (flip ? w - 1 - q : q) + dx;
            dst[(ch * h + r) * w + q] =
                (sr < 0 || sr >= h || sq < 0 || sq >= w) ? 0.0f : s[(ch * h + sr) * w + sq];
          }
    }
    return {x, y};
  }

  void work(int k, std::int64_t epoch, std::int64_t first) {
    const int count = options.workers;
    for (std::int64_t b = first + k; b < end_batch; b += count) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] { return stop || b < next_batch + 2 * count; });
        if (stop) return;
      }
      auto batch = gather(b, epoch);
      std::lock_guard<std::mutex> lock(mutex);
      ready.emplace(b, std::move(batch));
      changed.notify_all();
    }
  }

  void join() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
      changed.notify_all();
    }
    for (auto& t : workers) t.join();
    workers.clear();
    std::lock_guard<std::mutex> lock(mutex);
    stop = false;
    ready.clear();
  }
};

DataLoader::DataLoader(const Dataset& dataset, const LoaderOptions& options)
    : state_(std::make_unique<State>(dataset, options)) {
  if (options.batch < 1) throw Error("batch size must be at least 1, got " + std::to_string(options.batch));
  if (options.workers < 1 || options.workers > 64)
    throw Error("--workers must be between 1 and 64, got " + std::to_string(options.workers));
  state_->n = dataset.images.size(0);
  if (state_->n == 0) throw Error("the dataset is empty");
  if (dataset.labels.numel() != state_->n)
    throw Error("dataset has " + std::to_string(state_->n) + " samples but " +
                std::to_string(dataset.labels.numel()) + " labels");
  state_->sample_floats = dataset.images.numel() / state_->n;
}

DataLoader::~DataLoader() { state_->join(); }

std::int64_t DataLoader::batches_per_epoch() const { return state_->batches_per_epoch(); }

void DataLoader::start_epoch(std::int64_t epoch, std::int64_t skip) {
  State& s = *state_;
  s.join();
  s.order.resize(static_cast<std::size_t>(s.n));
  std::iota(s.order.begin(), s.order.end(), 0);
  if (s.options.shuffle) {
    Generator shuffle(s.options.seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch) + 1);
    for (std::int64_t i = s.n - 1; i > 0; --i)
      std::swap(s.order[static_cast<std::size_t>(i)],
                s.order[static_cast<std::size_t>(shuffle.next_u64() % static_cast<std::uint64_t>(i + 1))]);
  }
  s.next_batch = std::min(skip, s.batches_per_epoch());
  s.end_batch = s.batches_per_epoch();
  s.workers.reserve(static_cast<std::size_t>(s.options.workers));
  for (int k = 0; k < s.options.workers; ++k)
    s.workers.emplace_back([&s, k, epoch, first = s.next_batch] { s.work(k, epoch, first); });
}

bool DataLoader::next(Tensor& x, Tensor& y) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.next_batch >= s.end_batch) return false;
  s.changed.wait(lock, [&] { return s.ready.count(s.next_batch) > 0; });
  auto node = s.ready.extract(s.next_batch);
  x = std::move(node.mapped().first);
  y = std::move(node.mapped().second);
  ++s.next_batch;
  s.changed.notify_all();
  return true;
}

}  // namespace cpudl::data
