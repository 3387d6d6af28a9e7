// `cpudl bench allreduce`: MPI_Allreduce of float sums from 4 KiB to 64 MiB across the ranks mpirun
// started, what data-parallel training does with every gradient. Rank 0 prints each size's time,
// its algorithm and bus bandwidth (NCCL's convention: bus = algorithm x 2(n-1)/n, what each link
// carries in a ring), and t = alpha + bytes / beta with alpha the smallest message's time and beta
// the largest one's bandwidth, the terms of the cost model in docs/DISTRIBUTED.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/command.h"
#include "cli/usage_errors.h"
#include "train/distributed.h"

namespace cpudl::cli {
namespace {

struct BenchAllreduceOptions {
  std::int64_t max_mib = 64;
  double min_time = 0.25;
  bool json = false;
};

int run_bench_allreduce(const BenchAllreduceOptions& o) {
  const std::unique_ptr<train::Communicator> comm = train::Communicator::open(true);
  const int ranks = comm->size();
  using Clock = std::chrono::steady_clock;
  std::vector<double> sizes, seconds;
  if (comm->leader() && !o.json)
    std::printf("allreduce (sum of float32) on %d ranks\n%12s %10s %12s %12s\n", ranks, "bytes", "ms",
                "algbw GB/s", "busbw GB/s");
  for (std::int64_t bytes = 4096; bytes <= o.max_mib << 20; bytes *= 4) {
    std::vector<float> buffer(static_cast<std::size_t>(bytes / 4), 1.0f);
    comm->sum(buffer);  // warm-up: connections, registration
    const auto t0 = Clock::now();
    comm->sum(buffer);
    // Rank 0 chooses the repetitions so that every rank runs the same number of collectives.
    std::uint64_t reps = static_cast<std::uint64_t>(std::clamp(
        o.min_time / std::max(std::chrono::duration<double>(Clock::now() - t0).count(), 1e-7), 3.0, 20000.0));
    comm->broadcast(reps);
    const auto start = Clock::now();
    for (std::uint64_t r = 0; r < reps; ++r) comm->sum(buffer);
    const double t = std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(reps);
    const double algbw = static_cast<double>(bytes) / t * 1e-9, busbw = algbw * 2.0 * (ranks - 1) / ranks;
    sizes.push_back(static_cast<double>(bytes));
    seconds.push_back(t);
    if (!comm->leader()) continue;
    if (o.json)
      std::printf("%s\n", nlohmann::ordered_json{{"op", "allreduce"},
                                                 {"bytes", bytes},
                                                 {"ranks", ranks},
                                                 {"ms", t * 1e3},
                                                 {"algbw_gbs", algbw},
                                                 {"busbw_gbs", busbw}}
                              .dump()
                              .c_str());
    else
      std::printf("%12lld %10.4f %12.2f %12.2f\n", static_cast<long long>(bytes), t * 1e3, algbw, busbw);
  }
  // alpha: the smallest message's time (latency dominates it); beta: the largest message's
  // bandwidth (what a large gradient sustains). A least-squares line through all sizes is pulled
  // negative by large messages that fall out of cache and slow down.
  const double alpha = seconds.front(), beta = sizes.back() / seconds.back();
  if (comm->leader()) {
    if (o.json)
      std::printf("%s\n",
                  nlohmann::ordered_json{
                      {"fit", true}, {"ranks", ranks}, {"alpha_us", alpha * 1e6}, {"beta_gbs", beta * 1e-9}}
                      .dump()
                      .c_str());
    else
      std::printf("model: t = %.1f us + bytes / %.2f GB/s\n", alpha * 1e6, beta * 1e-9);
  }
  return 0;
}

}  // namespace

void add_bench_allreduce_command(CLI::App& bench, Action& action) {
  auto o = std::make_shared<BenchAllreduceOptions>();
  CLI::App* sub = bench.add_subcommand(
      "allreduce", "MPI_Allreduce of 4 KiB to 64 MiB across mpirun's ranks: time, bandwidth, latency fit");
  sub->add_option("--max-mib", o->max_mib, "Largest message in MiB (default 64)")->check(in_range(1, 4096));
  sub->add_option("--min-time", o->min_time, "Seconds to time each size (default 0.25)")
      ->check(in_range(0.001, 60.0));
  sub->add_flag("--json", o->json, "One JSON object per size, then the fit");
  sub->callback([&action, o] { action = [o] { return run_bench_allreduce(*o); }; });
}

}  // namespace cpudl::cli
