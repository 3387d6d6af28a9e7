// `cpudl bench llm`: prompt processing and generation speed of a GGUF model, with generation
// judged against the memory bandwidth measured in the same run (each generated token streams
// every weight matrix once, so bytes per token / bandwidth bounds the token rate). With
// --parallel N, generation runs N sequences at once through Context::eval_batch, as a server's
// concurrent streams do: the rate is their aggregate, and the weights are read once per N tokens.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/command.h"
#include "cli/usage_errors.h"
#include "cpudl/llm.h"
#include "cpudl/runtime.h"

namespace cpudl::cli {
namespace {

struct BenchLlmOptions {
  std::string model, cache_type = "f16";
  int prompt = 64, gen = 32, threads = 0, repetitions = 3, parallel = 1;
  bool json = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_bench_llm(const BenchLlmOptions& o) {
  const llm::Model model = llm::Model::load(o.model);
  const auto& c = model.config();
  const int threads = o.threads > 0 ? o.threads : compute_threads();
  const llm::ContextOptions options{o.prompt + o.gen + 1, llm::parse_cache_type(o.cache_type), threads,
                                    std::max({o.prompt, o.parallel, 1})};
  llm::Context ctx(model, options);
  std::vector<std::unique_ptr<llm::Context>> others;  // the other sequences of --parallel
  for (int i = 1; i < o.parallel; ++i) others.push_back(std::make_unique<llm::Context>(model, options));
  std::mt19937 gen(1);
  std::uniform_int_distribution<std::int32_t> pick(0, c.vocab - 1);
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(o.prompt));
  for (auto& t : prompt) t = pick(gen);
  const std::vector<std::int32_t> warm_up = prompt.empty() ? std::vector<std::int32_t>{1} : prompt;
  using Clock = std::chrono::steady_clock;
  auto time = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Warm-up: touches every weight page and builds oneDNN's kernels.
  ctx.eval(std::span(warm_up.data(), std::min<std::size_t>(warm_up.size(), 8)));
  std::vector<double> pp, tg;
  for (int r = 0; r < o.repetitions; ++r) {
    if (o.prompt > 0) {
      ctx.reset();
      pp.push_back(o.prompt / time([&] { ctx.eval(prompt); }));
    }
    if (o.gen > 0) {  // as llama-bench's tg test: single tokens from an empty cache
      ctx.reset();
      for (auto& other : others) other->reset();
      tg.push_back(o.gen * o.parallel / time([&] {
                     for (int i = 0; i < o.gen; ++i) {
                       const std::int32_t t =
                           prompt.empty() ? 1 : prompt[static_cast<std::size_t>(i) % prompt.size()];
                       if (others.empty()) {
                         ctx.eval(std::span(&t, 1));
                         continue;
                       }
                       std::vector<llm::Context::SequenceTokens> batch{{&ctx, std::span(&t, 1)}};
                       for (auto& other : others) batch.push_back({other.get(), std::span(&t, 1)});
                       llm::Context::eval_batch(batch);
                     }
                   }));
    }
  }
  const auto bytes_per_token = static_cast<double>(c.bytes_per_token);
  const double bandwidth = measure_read_bandwidth(threads, 0.5) * 1e9;
  const double pp_rate = pp.empty() ? 0 : median(pp), tg_rate = tg.empty() ? 0 : median(tg);
  const double pct =
      100.0 * tg_rate / o.parallel * bytes_per_token / bandwidth;  // weights read once per pass
  if (o.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"model", o.model},
                                               {"weight_type", c.weight_type},
                                               {"parameters", c.parameters},
                                               {"threads", threads},
                                               {"prompt", o.prompt},
                                               {"gen", o.gen},
                                               {"parallel", o.parallel},
                                               {"prompt_tokens_per_second", pp_rate},
                                               {"tokens_per_second", tg_rate},
                                               {"bytes_per_token", bytes_per_token},
                                               {"bandwidth_gbs", bandwidth / 1e9},
                                               {"pct_bandwidth", pct},
                                               {"repacked_bytes", c.repacked_bytes}}
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("%s (%s, %.0fM parameters), %d threads:\n", c.name.c_str(), c.weight_type.c_str(),
              static_cast<double>(c.parameters) / 1e6, threads);
  std::printf("  prompt %d tokens: %8.1f tokens/s\n", o.prompt, pp_rate);
  if (c.repacked_bytes > 0)
    std::printf(
        "  (prompt products on AMX tiles over weights repacked at load: %.1f MB besides the mapping; "
        "CPUDL_LLM_REPACK=off skips it)\n",
        static_cast<double>(c.repacked_bytes) / 1e6);
  if (o.parallel > 1) {
    std::printf(
        "  generate %d x %d sequences: %8.1f tokens/s in all (one pass per %d tokens: %.0f%% of the %.1f "
        "GB/s "
        "measured bandwidth)\n",
        o.gen, o.parallel, tg_rate, o.parallel, pct, bandwidth / 1e9);
    return 0;
  }
  std::printf(
      "  generate %d:      %8.1f tokens/s (%.1f MB per token: %.0f%% of the %.1f GB/s measured bandwidth)\n",
      o.gen, tg_rate, bytes_per_token / 1e6, pct, bandwidth / 1e9);
  return 0;
}

}  // namespace

void add_bench_llm_command(CLI::App& bench, Action& action) {
  auto o = std::make_shared<BenchLlmOptions>();
  CLI::App* b =
      bench.add_subcommand("llm", "Prompt and generation tokens/s of a GGUF model, vs memory bandwidth");
  b->add_option("-m,--model", o->model, "Model file (.gguf)")->required();
  b->add_option("--prompt", o->prompt, "Prompt tokens (default 64)")->check(in_range(0, 1 << 16));
  b->add_option("--gen", o->gen, "Generated tokens (default 32)")->check(in_range(0, 1 << 16));
  b->add_option("--repetitions", o->repetitions, "Runs of each test; the median is reported (default 3)")
      ->check(in_range(1, 1000));
  b->add_option("--parallel", o->parallel,
                "Sequences generated at once, their tokens in one forward pass (default 1)")
      ->check(in_range(1, 256));
  add_threads_option(b, o->threads);
  b->add_option("--cache-type", o->cache_type, "KV cache type: f16 (default), f32 or q8_0");
  b->add_flag("--json", o->json, "One JSON object");
  b->callback([&action, o] {
    action = [o] {
      if (o->threads > 0) check_thread_request(o->threads, "--threads");
      return run_bench_llm(*o);
    };
  });
}

}  // namespace cpudl::cli
