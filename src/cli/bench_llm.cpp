// `cpudl bench llm`: prompt processing and generation speed of a GGUF model, with generation
// judged against the memory bandwidth measured in the same run (each generated token streams
// every weight matrix once, so bytes per token / bandwidth bounds the token rate). With
// --parallel N, generation runs N sequences at once through Context::eval_batch, as a server's
// concurrent streams do: the rate is their aggregate, and the weights are read once per N tokens.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/usage_errors.h"
#include "cpudl/llm.h"
#include "cpudl/runtime.h"

namespace cpudl::cli {
namespace {

struct BenchLlmOptions {
  std::string model, cache_type = "f16";
  std::string prompt = "64", gen = "32", threads;  // comma-separated lists, as llama-bench's -p -n -t
  int repetitions = 3, parallel = 1;
  bool json = false, no_repack = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Mean and sample standard deviation, llama-bench's "t/s" column.
std::pair<double, double> mean_and_spread(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(std::max<std::size_t>(v.size(), 1));
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0};
}

// One test's rates over the repetitions: prompt processing of `prompt` tokens, and generation of
// `gen` single tokens from an empty cache (llama-bench's pp and tg tests).
struct Rates {
  std::vector<double> pp, tg;
};

// `after_repetition`, when given, hears each repetition's end (a progress bar).
Rates measure(const llm::Model& model, const BenchLlmOptions& o, int threads, int prompt_tokens,
              int gen_tokens, const std::function<void()>& after_repetition = {}) {
  const auto& c = model.config();
  const llm::ContextOptions options{prompt_tokens + gen_tokens + 1, llm::parse_cache_type(o.cache_type),
                                    threads, std::max({prompt_tokens, o.parallel, 1})};
  llm::Context ctx(model, options);
  std::vector<std::unique_ptr<llm::Context>> others;  // the other sequences of --parallel
  for (int i = 1; i < o.parallel; ++i) others.push_back(std::make_unique<llm::Context>(model, options));
  std::mt19937 gen(1);
  std::uniform_int_distribution<std::int32_t> pick(0, c.vocab - 1);
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(prompt_tokens));
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
  Rates r;
  for (int rep = 0; rep < o.repetitions; ++rep) {
    if (prompt_tokens > 0) {
      ctx.reset();
      r.pp.push_back(prompt_tokens / time([&] { ctx.eval(prompt); }));
    }
    if (gen_tokens > 0) {  // as llama-bench's tg test: single tokens from an empty cache
      ctx.reset();
      for (auto& other : others) other->reset();
      r.tg.push_back(gen_tokens * o.parallel / time([&] {
                       for (int i = 0; i < gen_tokens; ++i) {
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
    if (after_repetition) after_repetition();
  }
  return r;
}

std::vector<int> int_list(const std::string& text, const char* flag, int lowest) {
  std::vector<int> out;
  for (const std::int64_t v : parse_int_list(text, flag, lowest, 1 << 16)) out.push_back(static_cast<int>(v));
  return out;
}

// Lists: llama-bench's table, one row per threads x test, "t/s" as mean +/- standard deviation.
int run_bench_llm_table(const llm::Model& model, const BenchLlmOptions& o, const std::vector<int>& threads,
                        const std::vector<int>& prompts, const std::vector<int>& gens) {
  const auto& c = model.config();
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  if (!o.json) {
    std::printf("| model | size | params | threads | test | t/s |\n|---|---:|---:|---:|---:|---:|\n");
    std::fflush(stdout);
  }
  const auto tests = std::count_if(prompts.begin(), prompts.end(), [](int p) { return p > 0; }) +
                     std::count_if(gens.begin(), gens.end(), [](int g) { return g > 0; });
  Progress progress("bench llm", static_cast<std::int64_t>(threads.size()) * tests * o.repetitions, !o.json);
  std::int64_t done = 0;
  std::string measuring;
  const auto tick = [&] { progress.update(++done, measuring); };
  for (const int t : threads) {
    const auto row = [&](const std::string& test, const std::vector<double>& rates) {
      progress.clear();
      const auto [mean, spread] = mean_and_spread(rates);
      if (o.json) {
        rows.push_back({{"model", o.model},
                        {"weight_type", c.weight_type},
                        {"parameters", c.parameters},
                        {"threads", t},
                        {"test", test},
                        {"tokens_per_second", mean},
                        {"stddev", spread},
                        {"samples", rates}});
        return;
      }
      std::printf("| %s %s | %.2f MiB | %.2f M | %d | %s | %.2f ± %.2f |\n", c.name.c_str(),
                  c.weight_type.c_str(), static_cast<double>(c.bytes_per_token) / (1 << 20),
                  static_cast<double>(c.parameters) / 1e6, t, test.c_str(), mean, spread);
      std::fflush(stdout);
    };
    for (const int p : prompts) {
      measuring = "pp" + std::to_string(p) + ", " + std::to_string(t) + " threads";
      if (p > 0) row("pp" + std::to_string(p), measure(model, o, t, p, 0, tick).pp);
    }
    for (const int g : gens) {
      measuring = "tg" + std::to_string(g) + ", " + std::to_string(t) + " threads";
      if (g > 0)
        row("tg" + std::to_string(g) + (o.parallel > 1 ? "x" + std::to_string(o.parallel) : ""),
            measure(model, o, t, 0, g, tick).tg);
    }
  }
  if (o.json) std::printf("%s\n", rows.dump().c_str());
  return 0;
}

int run_bench_llm(const BenchLlmOptions& o) {
  const std::vector<int> prompts = int_list(o.prompt, "--prompt", 0), gens = int_list(o.gen, "--gen", 0);
  std::vector<int> threads =
      o.threads.empty() ? std::vector<int>{compute_threads()} : int_list(o.threads, "--threads", 1);
  for (const int t : threads) check_thread_request(t, "--threads");
  const llm::Model model = llm::Model::load(o.model, {repack_wanted(o.no_repack)});
  if (prompts.size() > 1 || gens.size() > 1 || threads.size() > 1)
    return run_bench_llm_table(model, o, threads, prompts, gens);
  const auto& c = model.config();
  const int t = threads[0], prompt = prompts[0], gen = gens[0];
  Progress progress("bench llm", o.repetitions, !o.json);
  int done = 0;
  const Rates rates = measure(model, o, t, prompt, gen, [&] { progress.update(++done); });
  progress.clear();
  const auto bytes_per_token = static_cast<double>(c.bytes_per_token);
  const double bandwidth = measure_read_bandwidth(t, 0.5) * 1e9;
  const double pp_rate = rates.pp.empty() ? 0 : median(rates.pp),
               tg_rate = rates.tg.empty() ? 0 : median(rates.tg);
  const double pct =
      100.0 * tg_rate / o.parallel * bytes_per_token / bandwidth;  // weights read once per pass
  if (o.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"model", o.model},
                                               {"weight_type", c.weight_type},
                                               {"parameters", c.parameters},
                                               {"threads", t},
                                               {"prompt", prompt},
                                               {"gen", gen},
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
              static_cast<double>(c.parameters) / 1e6, t);
  std::printf("  prompt %d tokens: %8.1f tokens/s\n", prompt, pp_rate);
  if (c.repacked_bytes > 0)
    std::printf(
        "  (weights repacked at load into the panels this CPU's kernels read (AMX tiles, Q4_0 and Q4_K "
        "VNNI generation panels): %.1f MB besides the mapping; --no-repack skips it)\n",
        static_cast<double>(c.repacked_bytes) / 1e6);
  if (o.parallel > 1) {
    std::printf(
        "  generate %d x %d sequences: %8.1f tokens/s in all (one pass per %d tokens: %.0f%% of the %.1f "
        "GB/s "
        "measured bandwidth)\n",
        gen, o.parallel, tg_rate, o.parallel, pct, bandwidth / 1e9);
    return 0;
  }
  std::printf(
      "  generate %d:      %8.1f tokens/s (%.1f MB per token: %.0f%% of the %.1f GB/s measured bandwidth)\n",
      gen, tg_rate, bytes_per_token / 1e6, pct, bandwidth / 1e9);
  return 0;
}

}  // namespace

void add_bench_llm_command(CLI::App& bench, Action& action) {
  auto o = std::make_shared<BenchLlmOptions>();
  CLI::App* b =
      bench.add_subcommand("llm", "Prompt and generation tokens/s of a GGUF model, vs memory bandwidth");
  b->add_option("-m,--model", o->model, "Model file (.gguf)")->required();
  b->add_option("--prompt", o->prompt, "Prompt tokens (default 64); a list (64,512) runs each")
      ->type_name("LIST");
  b->add_option("--gen", o->gen, "Generated tokens (default 32); a list (32,128) runs each")
      ->type_name("LIST");
  b->add_option(
       "--repetitions", o->repetitions,
       "Runs of each test: the median is reported, or with lists the mean +/- standard deviation (default 3)")
      ->check(in_range(1, 1000));
  b->add_option("--parallel", o->parallel,
                "Sequences generated at once, their tokens in one forward pass (default 1)")
      ->check(in_range(1, 256));
  b->add_option(
       "-t,--threads", o->threads,
       "Compute threads (default: usable physical cores); a list (1,2) runs each, as llama-bench's -t")
      ->type_name("LIST");
  b->add_option("--cache-type", o->cache_type, "KV cache type: f16 (default), f32 or q8_0");
  b->add_flag("--json", o->json, "One JSON object (with lists: an array, one object per row)");
  add_no_repack_flag(b, o->no_repack);
  b->callback([&action, o] { action = [o] { return run_bench_llm(*o); }; });
}

}  // namespace cpudl::cli
