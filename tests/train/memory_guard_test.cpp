// train --max-memory: the allocator's ceiling on live tensor bytes, the plan made from two probe
// steps (checked against the probes' own figures: the micro-batch it picks is the largest whose
// estimate fits, checkpointing only when needed), the probes leaving no trace, sizes parsed.
#include <gtest/gtest.h>

#include <cstring>

#include "cpudl/error.h"
#include "cpudl/nn.h"
#include "cpudl/runtime.h"
#include "train/memory_guard.h"

namespace cpudl::train {
namespace {

TEST(MemoryGuard, AnAllocationPastTheLimitThrowsAndCountsNothing) {
  const std::size_t live = live_tensor_bytes();
  {
    const TensorMemoryLimit limit(live + (1u << 20));
    const Tensor small = Tensor::empty({1 << 16});  // 256 KiB: fits
    EXPECT_EQ(live_tensor_bytes(), live + (1u << 18));
    try {
      (void)Tensor::empty({1 << 19});  // 2 MiB more
      ADD_FAILURE() << "no MemoryLimitError";
    } catch (const MemoryLimitError& e) {
      EXPECT_EQ(e.limit, live + (1u << 20));
      EXPECT_EQ(e.needed, live + (1u << 18) + (1u << 21));
      EXPECT_NE(std::string(e.what()).find("against a limit of"), std::string::npos) << e.what();
    }
    EXPECT_EQ(live_tensor_bytes(), live + (1u << 18));
  }
  EXPECT_EQ(tensor_memory_limit(), 0u);
  EXPECT_NO_THROW((void)Tensor::empty({1 << 22}));
  EXPECT_EQ(live_tensor_bytes(), live);
}

TEST(MemoryGuard, ParsesSizesAndRefusesOthers) {
  EXPECT_EQ(parse_memory_size("2G", "--max-memory"), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size("1.5GiB", "--max-memory"), std::size_t{3} << 29);
  EXPECT_EQ(parse_memory_size("800M", "--max-memory"), std::size_t{800} << 20);
  EXPECT_EQ(parse_memory_size("64kb", "--max-memory"), std::size_t{64} << 10);
  EXPECT_EQ(parse_memory_size("123456", "--max-memory"), 123456u);
  for (const char* bad : {"", "G", "2X", "-1G", "0", "nan", "2 G"})
    EXPECT_THROW((void)parse_memory_size(bad, "--max-memory"), UsageError) << bad;
}

struct Data {
  Tensor x, y;
};
Data samples(std::int64_t n, std::int64_t channels, std::int64_t size) {
  Data d{Tensor::randn({n, channels, size, size}), Tensor::zeros({n}, DType::i64)};
  for (std::int64_t i = 0; i < n; ++i) d.y.data_as<std::int64_t>()[i] = i % 10;
  return d;
}

TEST(MemoryGuard, PicksTheLargestMicroBatchWhoseEstimateFits) {
  manual_seed(1);
  const auto model = nn::make_model("lenet5");
  const Data d = samples(4, 1, 28);
  const auto plan = [&](std::size_t limit) { return plan_memory({*model, d.x, d.y, 64, 64, 1, limit}); };
  const MemoryPlan roomy = plan(std::size_t{1} << 30);
  EXPECT_EQ(roomy.accumulate, 1);
  EXPECT_FALSE(roomy.checkpoint_activations);  // lenet5 has no segments
  // LeNet-5 keeps about 20-30 KiB of activations and their gradients per 28x28 sample.
  EXPECT_GT(roomy.per_sample_bytes, 10'000u);
  EXPECT_LT(roomy.per_sample_bytes, 100'000u);
  EXPECT_EQ(roomy.estimated_peak, roomy.fixed_bytes + 64 * roomy.per_sample_bytes);
  // Room for 16.5 samples (against 90% of the limit): micro-batches of 16, --accumulate 4.
  const auto room_for = [&](double samples) {
    return static_cast<std::size_t>(
        (static_cast<double>(roomy.fixed_bytes) + samples * static_cast<double>(roomy.per_sample_bytes)) /
        0.9);
  };
  EXPECT_EQ(plan(room_for(16.5)).accumulate, 4);
  EXPECT_EQ(plan(room_for(40)).accumulate, 2);
  try {
    (void)plan(room_for(0.5));
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold one sample's step"), std::string::npos) << e.what();
  }
  try {
    (void)plan(roomy.fixed_bytes / 2);
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is below what the run holds before any activation"),
              std::string::npos)
        << e.what();
  }
}

TEST(MemoryGuard, ResNetTurnsToCheckpointingAndTheProbesLeaveNoTrace) {
  manual_seed(2);
  const auto model = nn::make_model("resnet18", 10, 3, /*cifar_stem=*/true);
  const Data d = samples(4, 3, 16);
  const nn::NamedTensors before = model->state_dict();
  std::vector<Tensor> copies;
  for (const auto& [name, t] : before) copies.push_back(t.clone());
  const std::uint64_t rng = default_generator().state();
  const auto plan = [&](std::size_t limit) { return plan_memory({*model, d.x, d.y, 64, 64, 1, limit}); };
  const MemoryPlan roomy = plan(std::size_t{4} << 30);
  EXPECT_EQ(roomy.accumulate, 1);
  EXPECT_FALSE(roomy.checkpoint_activations);
  // Room for 13 samples without checkpointing (micro-batches of 8, a divisor of 64): with it, 16 fit.
  const auto limit = static_cast<std::size_t>(
      (static_cast<double>(roomy.fixed_bytes) + 13.5 * static_cast<double>(roomy.per_sample_bytes)) / 0.9);
  const MemoryPlan tight = plan(limit);
  EXPECT_TRUE(tight.checkpoint_activations);
  EXPECT_EQ(tight.accumulate, 4);
  EXPECT_LT(tight.per_sample_bytes, roomy.per_sample_bytes);
  EXPECT_LE(tight.estimated_peak, limit);
  // Running statistics, counters, weights, random state and gradients as they were.
  const nn::NamedTensors after = model->state_dict();
  for (std::size_t i = 0; i < after.size(); ++i) {
    const Tensor a = after[i].second.contiguous(), b = copies[i];
    ASSERT_EQ(a.numel(), b.numel());
    EXPECT_EQ(
        std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype())),
        0)
        << after[i].first;
  }
  EXPECT_EQ(default_generator().state(), rng);
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace cpudl::train
